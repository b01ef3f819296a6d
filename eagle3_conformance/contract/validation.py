"""Semantic validation of a loaded contract: cross-field consistency (:func:`semantic_problems`,
with the draft-method rules of :mod:`.families`), the ``fixture`` it names
(:func:`fixture_problems`), and the sizes a model must share with its ``target`` section
(:func:`target_mismatches`, which the reference model and ``validate`` both apply).
"""

from __future__ import annotations

from typing import Any, Optional

from eagle3_conformance.contract.families import method_problems, mtp_input_streams
from eagle3_conformance.contract.models import Contract
from eagle3_conformance.contract.sections import KeyPath
from eagle3_conformance.core.notation import Boundary


def semantic_problems(c: Contract) -> list[tuple[KeyPath, str]]:
    """Cross-field consistency. Returns (key path, message) pairs; empty when consistent."""
    return (_capture_problems(c) + _size_problems(c) + _verifier_problems(c) + _pairing_problems(c)
            + _layer_id_problems(c) + _band_problems(c) + _gate_vocab_position_problems(c) + method_problems(c)
            + _parallel_problems(c))


def pipeline_refusal(pp_size: int, method: str = "eagle3") -> Optional[str]:
    """Why SGLang 0.5.23 cannot serve this draft with pipeline parallelism ``pp_size``, or None.

    ``arg_groups/validation_hook.py:131-138`` (``check_pipeline_parallel_compat``): with pp > 1 the
    only speculative algorithm is EAGLE (not EAGLE3); ``:724-728``: no aux-hidden-state capture with
    pp != 1, "the capture hooks only see the layers on the last pipeline rank" (sgl-project/sglang#39644,
    docs/engine-reference.md)."""
    if int(pp_size) <= 1 or method not in ("eagle3", "dflash"):
        return None
    return (f"pipeline parallelism (pp_size {pp_size}): SGLang 0.5.23 refuses aux capture with pp > 1 "
            "(arg_groups/validation_hook.py:131-138 allows only EAGLE with PP; :724-728; sgl-project/sglang#39644): "
            "an EAGLE-3 draft cannot be served this way; serve with --pp-size 1 (tensor parallelism is fine)")


def _parallel_problems(c: Contract) -> list[tuple[KeyPath, str]]:
    why = pipeline_refusal(c.engines.sglang_pp_size, c.method)
    return [(("engines", "sglang_pp_size"), why)] if why else []


def _capture_problems(c: Contract) -> list[tuple[KeyPath, str]]:
    """The aux boundaries and the feature width."""
    out: list[tuple[KeyPath, str]] = []
    L = c.target.num_hidden_layers
    aux = c.capture.parsed
    for i, b in enumerate(aux):
        if b.final and c.method != "mtp":
            out.append((("capture", "boundaries", i), "F cannot be an aux slot; aux slots are B_k boundaries "
                                                      "(only an MTP head reads F: method mtp)"))
        if b.index > L:
            out.append((("capture", "boundaries", i), f"{b} is beyond B_{L} (target has L={L})"))
        if b.index == 0 and not c.capture.allow_embedding:
            out.append(
                (("capture", "boundaries", i),
                 "B_0 (embedding output) is an aux slot but capture.allow_embedding is false")
            )
    idx = [b.index for b in aux]
    if len(set(idx)) != len(idx):
        out.append((("capture", "boundaries"), f"duplicate boundaries {c.capture.boundaries}"))
    elif idx != sorted(idx):
        out.append((("capture", "boundaries"), f"boundaries must be strictly ascending: {c.capture.boundaries}"))
    K = len(aux)
    streams = mtp_input_streams(c)
    want = K * c.draft.target_hidden_size * streams
    if c.capture.feature_width != want:
        per = f" x mtp.input_streams {streams}" if streams > 1 else ""
        out.append(
            (("capture", "feature_width"),
             f"{c.capture.feature_width} != K x target_hidden_size{per} = {K} x "
             f"{c.draft.target_hidden_size}{f' x {streams}' if per else ''} = {want}")
        )
    return out


def _size_problems(c: Contract) -> list[tuple[KeyPath, str]]:
    """Draft widths and vocabulary against the target."""
    out: list[tuple[KeyPath, str]] = []
    if c.draft.target_hidden_size != c.target.hidden_size:
        out.append(
            (("draft", "target_hidden_size"),
             f"{c.draft.target_hidden_size} != target.hidden_size {c.target.hidden_size}")
        )
    if c.draft.draft_vocab_size > c.target.vocab_size:
        out.append(
            (("draft", "draft_vocab_size"),
             f"{c.draft.draft_vocab_size} > target vocab_size {c.target.vocab_size}")
        )
    return out


def _verifier_problems(c: Contract) -> list[tuple[KeyPath, str]]:
    """The verifier slot: B_L pre-norm or F post-norm."""
    out: list[tuple[KeyPath, str]] = []
    L = c.target.num_hidden_layers
    v = c.verifier_last.parsed
    if v.final and c.verifier_last.norm != "post":
        out.append((("verifier_last", "norm"), "F is post-final-norm: norm must be 'post'"))
    if not v.final:
        if v.index != L:
            out.append(
                (("verifier_last", "tensor"),
                 f"verifier_last must be B_{L} (pre-norm) or F (post-norm), got {v}")
            )
        if c.verifier_last.norm != "pre":
            out.append((("verifier_last", "norm"), f"B_{L} is pre-final-norm: norm must be 'pre'"))
    return out


def _pairing_problems(c: Contract) -> list[tuple[KeyPath, str]]:
    """The loss-mask offset and the hs-connectors transfer backend."""
    out: list[tuple[KeyPath, str]] = []
    al = c.alignment
    if al.loss_mask != al.target and not (al.loss_mask_reason or "").strip():
        out.append((("alignment", "loss_mask"),
                    f"loss-mask offset {al.loss_mask} differs from the target offset {al.target}: the first "
                    "drafted position gets no loss and a stale one is supervised (sgl-project/SpecForge#885, "
                    "#895); align them, or state why in alignment.loss_mask_reason"))
    if c.training.transfer != "file" and c.training.tool != "speculators":
        out.append((("training", "transfer"),
                    f"transfer {c.training.transfer!r} is an hs-connectors backend, read by speculators; training.tool "
                    f"{c.training.tool!r} reads its own files (use transfer: file)"))
    return out


def _layer_id_problems(c: Contract) -> list[tuple[KeyPath, str]]:
    """The layer ids written into the draft config."""
    out: list[tuple[KeyPath, str]] = []
    L = c.target.num_hidden_layers
    K = len(c.capture.parsed)
    ids = c.draft.layer_ids
    if ids.location == "absent" and ids.values is not None:
        out.append((("draft", "layer_ids", "values"), "location is 'absent' but values are given"))
    if ids.location != "absent":
        if not ids.values:
            out.append((("draft", "layer_ids", "values"), f"location is {ids.location!r} but no values"))
        elif len(ids.values) != K:
            out.append(
                (("draft", "layer_ids", "values"),
                 f"{len(ids.values)} ids written but {K} aux boundaries declared")
            )
        if ids.values:
            dup = sorted({v for v in ids.values if ids.values.count(v) > 1})
            if dup:
                out.append((("draft", "layer_ids", "values"), f"duplicate layer ids {dup}: each aux slot needs its own layer"))
            for i, lid in enumerate(ids.values):
                if lid > L:
                    out.append((("draft", "layer_ids", "values", i), f"layer id {lid} is beyond the target's L={L} layers"))
        from eagle3_conformance.engine_ids import layer_id_problems  # the id rules, without an engine

        if c.method in ("eagle3", "eagle1", "eagle2"):
            out += [(("draft", "layer_ids") + loc, msg) for loc, msg in layer_id_problems(
                L, c.capture.boundaries, ids.values, ids.location, sglang=bool(c.engines.sglang_validated),
                model_file=c.engines.sglang_model_file, architecture=c.target.architecture)]
    return out


def _band_problems(c: Contract) -> list[tuple[KeyPath, str]]:
    """Norm bands: one per declared slot, ordered limits, calibrated to gate."""
    out: list[tuple[KeyPath, str]] = []
    aux = c.capture.parsed
    v = c.verifier_last.parsed
    nb = c.norm_bands
    seen = set()
    declared = set(aux) | {v}
    for i, band in enumerate(nb.bands):
        try:
            b = Boundary.parse(band.slot)
        except ValueError as e:
            out.append((("norm_bands", "bands", i, "slot"), str(e)))
            continue
        if b not in declared:
            out.append((("norm_bands", "bands", i, "slot"), f"{b} is not an aux slot or the verifier slot"))
        if b in seen:
            out.append((("norm_bands", "bands", i, "slot"), f"two bands for {b}"))
        seen.add(b)
        if band.lo >= band.hi:
            out.append((("norm_bands", "bands", i), f"lo {band.lo} >= hi {band.hi}"))
    if nb.status == "calibrated":
        missing = [str(b) for b in sorted(declared, key=Boundary.sort_key) if b not in seen]
        if missing:
            out.append((("norm_bands", "bands"), f"status is calibrated but no band for {missing}"))
    elif nb.bands:
        out.append(
            (("norm_bands", "status"),
             "bands are listed but status is 'uncalibrated': uncalibrated bands cannot gate; "
             "set status: calibrated or remove them")
        )
    for i, pos in enumerate(nb.exclude_positions):
        if pos < 0:
            out.append((("norm_bands", "exclude_positions", i), f"position {pos} is negative; positions start at 0"))
    return out


def _gate_vocab_position_problems(c: Contract) -> list[tuple[KeyPath, str]]:
    """The accept-length gate, the vocab mapping sizes, the draft's positions."""
    # an accept-length floor needs no calibrated norm bands (issue 41): it gates the engine's own accept
    # counters, not a magnitude; it comes from a recorded good run (check-captures / accept --write-floor)
    out: list[tuple[KeyPath, str]] = []
    if c.vocab is not None:
        if c.vocab.size != c.target.vocab_size:
            out.append((("vocab", "size"), f"{c.vocab.size} != target.vocab_size {c.target.vocab_size}"))
        if c.vocab.draft_size != c.draft.draft_vocab_size:
            out.append((("vocab", "draft_size"),
                        f"{c.vocab.draft_size} != draft.draft_vocab_size {c.draft.draft_vocab_size}"))
    pz = c.positions
    if (pz.draft_max_position_embeddings is not None and pz.serving_max_len is not None
            and pz.serving_max_len > pz.draft_max_position_embeddings):
        out.append((("positions", "serving_max_len"),
                    f"{pz.serving_max_len} > draft_max_position_embeddings {pz.draft_max_position_embeddings}"))
    if c.multimodal is not None and c.multimodal.image_token_id >= c.target.vocab_size:
        out.append((("multimodal", "image_token_id"),
                    f"{c.multimodal.image_token_id} >= target.vocab_size {c.target.vocab_size}"))
    return out


def fixture_problems(c: Contract) -> list[tuple[KeyPath, str]]:
    """``fixture`` names a fixture :func:`eagle3_conformance.testbed.fixtures.build_fixture` can find: a folder of
    ``fixtures/`` holding ``fixture.json``, or a folder path holding one (resolved as
    :func:`eagle3_conformance.environment.fixture_specs.fixture_spec` resolves it), whose ``fixture.json`` is JSON.
    Returns (key path, message) pairs naming the known fixtures; empty when it resolves or is unset.

    Not part of :func:`semantic_problems` (it reads the file system); ``eagle3-conformance validate``
    runs it, commands that run a contract report an absent fixture when they need it. From an
    installed package (no ``fixtures/``) a name of :data:`eagle3_conformance.environment.shipped.EMBEDDED_FIXTURES`
    is no problem: ``validate`` prints :func:`~eagle3_conformance.environment.shipped.checkout_fixture_note`."""
    if not c.fixture:
        return []
    from eagle3_conformance.environment.fixture_specs import FixtureError, fixture_spec, known_fixtures
    from eagle3_conformance.environment.shipped import checkout_fixture_note

    if checkout_fixture_note(c.fixture):  # installed package: a checkout fixture, not a misspelling
        return []

    try:
        fixture_spec(c.fixture)
    except FixtureError as e:
        if "no such fixture" not in str(e):
            return [(("fixture",), f"fixture {c.fixture!r}: {e}")]
        known = known_fixtures()
        return [(("fixture",), f"fixture {c.fixture!r} is not a known fixture; known: "
                 + (", ".join(known) if known else "none (no fixtures/ folder next to the package)")
                 + " (or a folder path holding fixture.json)")]
    return []


TARGET_KEYS = ("num_hidden_layers", "hidden_size", "vocab_size")
"""The target sizes a model must share with its contract's ``target`` section."""


def target_mismatches(got: dict[str, int], archs: list[str], target: Any) -> list[tuple[str, Any, Any]]:
    """``(key, the model's value, the contract's value)`` for each of ``got`` (keys of
    :data:`TARGET_KEYS`) that differs from the contract's ``target`` section, and ``architecture``
    when the model lists architectures and none is the contract's. Empty when the model is the
    contract's target. Applied by :func:`eagle3_conformance.reference.load_reference_model` and by
    ``validate`` (:func:`eagle3_conformance.authoring.local_configs.config_problems`)."""
    out: list[tuple[str, Any, Any]] = [(k, v, getattr(target, k)) for k, v in got.items() if v != getattr(target, k)]
    if archs and target.architecture not in archs:
        out.append(("architecture", archs[0], target.architecture))
    return out
