"""The contract document ``eagle3-conformance init`` writes: its one job is building the ruamel
``CommentedMap`` from the facts (:mod:`eagle3_conformance.authoring.init_facts`), one builder per
contract section (:func:`build_document`), and setting ``precision.serving`` (:func:`set_serving_dtype`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from eagle3_conformance.authoring.configs import DTYPES, one_plus_norm
from eagle3_conformance.authoring.init_facts import CaptureFacts, DraftFacts, TargetFacts
from eagle3_conformance.authoring.yaml_doc import eol
from eagle3_conformance.core.errors import UsageError

if TYPE_CHECKING:  # ruamel is imported where a document is built
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

SPECFORGE_LOSS_MASK_REASON = (
    "SpecForge 0.2.0 TargetHead.preprocess (modeling/target/target_head.py:103-108) shifts input_ids and target "
    "left by one but not loss_mask: l_t is paired with (h_t, x_t+1, F_t+1), as its trainer does "
    "(sgl-project/SpecForge#885, open)")



SERVING_DTYPES = ("auto", "float32", "bfloat16", "float16")
"""``init --serving-dtype`` values: ``auto`` = the serving engine's own dtype=auto rule."""


def set_serving_dtype(doc: CommentedMap, serving_dtype: str) -> None:
    """``precision.serving`` = the dtype the server is launched with (``init --serving-dtype``; its
    ``--dtype``), the engine's dtype=auto answer kept in the comment; the gates' comments follow. ``auto``
    leaves the derived value (:func:`eagle3_conformance.authoring.precision.derive`).

    Raises:
        UsageError: a value not in :data:`SERVING_DTYPES`.
    """
    if serving_dtype not in SERVING_DTYPES:
        raise UsageError(f"--serving-dtype {serving_dtype!r}: expected one of {', '.join(SERVING_DTYPES)}")
    if serving_dtype == "auto":
        return
    p = doc["precision"]
    auto = p["serving"]
    p["serving"] = serving_dtype
    eol(p, f"the server is launched with --dtype {serving_dtype} (init --serving-dtype); its dtype=auto rule would "
        f"serve {auto}", "serving")
    doc["gates"] = _gates(p["training"], serving_dtype)  # their comments name the dtype each resolves for


# --- the document, one builder per section ----------------------------------------------------


def _seq(items: list[Any], flow: bool = True) -> CommentedSeq:
    from ruamel.yaml.comments import CommentedSeq

    s = CommentedSeq(items)
    if flow:
        s.fa.set_flow_style()
    return s


def _provenance(t: TargetFacts, dr: DraftFacts, cap: CaptureFacts, v_final: bool):
    from ruamel.yaml.comments import CommentedMap

    p = CommentedMap()
    p["target"] = f"{t.file}: architectures[0], {t.L_key}, {t.d_key}, {t.V_key}"
    p["draft"] = (f"{dr.file}: architectures[0], {dr.width_key}, "
                  f"{dr.slot_width_key or 'no target_hidden_size (slot width = '}"
                  + ("" if dr.slot_width_key else f"{'target hidden_size' if dr.speculators_format else 'hidden_size'})")
                  + f", {dr.vocab_note}")
    p["layer_ids_source"] = cap.source
    p["capture"] = f"{cap.rule}; engine {cap.inferred or cap.engine}"
    p["verifier_last"] = ("F: post-final-norm (--verifier F)" if v_final else
                          "B_L pre-norm: speculators stores the last layer before the final norm and "
                          "applies verifier_norm in training (REFERENCE.md 5.3)")
    p["norm_bands"] = "uncalibrated: run `eagle3-conformance calibrate` on real data (REFERENCE.md 7.3)"
    return p


def _target(t: TargetFacts, out_dir: Path):
    from ruamel.yaml.comments import CommentedMap

    m = CommentedMap()
    m["name"] = t.name
    if t.dir is not None:
        m["path"] = Path(os.path.relpath(t.dir.resolve(), out_dir)).as_posix()
        eol(m, "relative to this file; used as the reference model", "path")
    m["architecture"] = t.arch
    eol(m, f"{t.file.name}: architectures[0]", "architecture")
    m["num_hidden_layers"] = t.L
    eol(m, f"L, {t.file.name}: {t.L_key}", "num_hidden_layers")
    m["hidden_size"] = t.d
    eol(m, f"d, {t.file.name}: {t.d_key}", "hidden_size")
    m["vocab_size"] = t.V
    eol(m, f"{t.file.name}: {t.V_key}", "vocab_size")
    m["dtype"] = t.dtype
    eol(m, "the checkpoint's, torch_dtype" if t.config_dtype in DTYPES else "no torch_dtype: bfloat16 assumed",
        "dtype")
    one_plus = one_plus_norm(t.model_type)
    m["final_norm"] = "rmsnorm_one_plus" if one_plus else "rmsnorm"
    eol(m, f"model_type {t.model_type!r}: " + ("x*(1+w)" if one_plus else "x*w"), "final_norm")
    return m


def _draft(dr: DraftFacts, cap: CaptureFacts, out_dir: Path):
    from ruamel.yaml.comments import CommentedMap

    from eagle3_conformance.engine_ids import SGLANG_KEY, TOP_KEY

    m = CommentedMap()
    m["name"] = dr.name
    if dr.dir is not None:
        m["path"] = Path(os.path.relpath(dr.dir.resolve(), out_dir)).as_posix()
    m["architecture"] = dr.arch
    eol(m, f"{dr.file.name}: architectures[0]", "architecture")
    m["hidden_size"] = dr.width
    eol(m, f"{dr.file.name}: {dr.width_key} (fc output width)", "hidden_size")
    m["target_hidden_size"] = dr.slot_width
    eol(m, f"{dr.file.name}: {dr.slot_width_key}" if dr.slot_width_key else
        ("speculators never sets it: fc input is num_aux x verifier width" if dr.speculators_format
         else "absent: SGLang uses hidden_size (llama_eagle3.py:151-154)"), "target_hidden_size")
    m["draft_vocab_size"] = int(dr.vocab)
    eol(m, dr.vocab_note if dr.vocab_note != "draft_vocab_size" else f"{dr.file.name}: draft_vocab_size",
        "draft_vocab_size")
    m["pre_fc_norm"] = dr.pre_fc
    eol(m, "from norm_before_fc / fc_norm / use_aux_norm", "pre_fc_norm")
    no = _norm_output(dr.file)
    if no is not None:  # issue 37: Eagle3.1 norm_output, stated only when the config states it
        m["norm_output"] = no
        eol(m, f"{dr.file.name}: norm_output (true: the post-norm state is fed back)", "norm_output")
    li = CommentedMap()
    li["values"] = _seq(cap.ids) if cap.ids is not None else None
    eol(li, "as written in the draft config", "values")
    li["location"] = cap.location
    eol(li, {"nested": SGLANG_KEY, "top_level": f"top-level {TOP_KEY}",
             "absent": "no key: the engine default applies"}[cap.location]
        + ("; IGNORED by SGLang, which captures its defaults" if cap.tool == "sglang" and cap.location == "top_level"
           else ""), "location")
    m["layer_ids"] = li
    return m


def _capture(cap: CaptureFacts, d: int, allow_embedding: bool):
    from ruamel.yaml.comments import CommentedMap

    m = CommentedMap()
    m["boundaries"] = _seq([str(b) for b in cap.boundaries])
    eol(m, f"what {cap.engine} captures: {cap.rule}", "boundaries")
    m["allow_embedding"] = bool(allow_embedding)
    K = len(cap.boundaries)
    m["feature_width"] = K * d
    eol(m, f"K x target_hidden_size = {K} x {d}", "feature_width")
    return m


def _verifier(L: int, v_final: bool):
    from ruamel.yaml.comments import CommentedMap

    m = CommentedMap()
    m["tensor"] = "F" if v_final else f"B_{L}"
    eol(m, "post-final-norm" if v_final else "B_L pre-norm (speculators stores it; trainer applies verifier_norm)",
        "tensor")
    m["norm"] = "post" if v_final else "pre"
    return m


def _norm_bands():
    from ruamel.yaml.comments import CommentedMap

    m = CommentedMap()
    m["status"] = "uncalibrated"
    eol(m, "run `eagle3-conformance calibrate` to measure bands", "status")
    m["exclude_positions"] = _seq([0])
    eol(m, "position 0 carries massive activations (REFERENCE.md 7.3)", "exclude_positions")
    return m


def _precision(t: TargetFacts, cap: CaptureFacts, generation_dtype: str = "auto"):
    """The dtype the hidden states are produced in, per path, by the engine's own ``auto`` rule
    (:mod:`eagle3_conformance.authoring.precision`), each commented with the rule."""
    from ruamel.yaml.comments import CommentedMap

    from eagle3_conformance.authoring.precision import derive

    tr, sv = derive(cap.tool, cap.version, {"model_type": t.model_type, "dtype": t.config_dtype}, generation_dtype)
    m = CommentedMap()
    m["training"] = tr.dtype
    eol(m, tr.why, "training")
    m["serving"] = sv.dtype
    eol(m, sv.why, "serving")
    return m


def _gates(training: str, serving: str):
    """Every gate with its default (null: derived from the production precision of the path judged,
    docs/gates.md), each commented with the value it resolves to, so that a user sees what can be tuned."""
    from ruamel.yaml.comments import CommentedMap

    from eagle3_conformance.core import gates as g

    dts = [d if d in g.IDENTITY_NOISE_DEG else "bfloat16" for d in (training, serving)]

    def per(table, unit: str = "") -> str:
        if dts[0] == dts[1]:
            return f"{table[dts[0]]}{unit} for {dts[0]}"
        return f"{table[dts[0]]}{unit} for training data ({dts[0]}), {table[dts[1]]}{unit} for serving ({dts[1]})"

    m = CommentedMap()
    rows = [
        ("identity_noise_deg", f"null = {per(g.IDENTITY_NOISE_DEG, ' deg')}: a slot fails only when its declared "
                               "boundary is this much farther than its best match (else undecidable)"),
        ("resolvable_max_cosine", f"null = {g.RESOLVABLE_MAX_COSINE}: tokens whose boundaries the reference cannot "
                                  "tell apart (massive activations, repeats) are excluded and counted"),
        ("slot_identity_min_cosine", f"null = {per(g.ROW_MIN_COSINE)}: per-row floor of row_fingerprint"),
        ("cross_path_min_cosine", f"null = {per(g.CROSS_PATH_MIN_COSINE)}: per-row agreement of two paths (the "
                                  "noisier side's)"),
        ("min_accept_length", "null = acceptance not gated; set it for a pair with a trained draft"),
    ]
    for key, note in rows:
        m[key] = None
        eol(m, note, key)
    return m


def _engines(cap: CaptureFacts):
    from ruamel.yaml.comments import CommentedMap

    m = CommentedMap()
    m["sglang_validated"] = _seq([])
    eol(m, "filled in once a run on these versions passed", "sglang_validated")
    if cap.model_file:
        m["sglang_model_file"] = cap.model_file
        eol(m, "SGLang model file whose setter rule translated the ids", "sglang_model_file")
    if cap.tool == "vllm" and cap.version:
        v = CommentedMap()
        v["version"] = cap.version
        v["runners"] = _seq(["v1", "v2"])
        eol(v, "both model runners' id readers were asked and capture the same boundaries", "runners")
        m["vllm"] = v
    return m


def build_document(t: TargetFacts, dr: DraftFacts, cap: CaptureFacts, v_final: bool, name: Optional[str],
                   allow_embedding: bool, out_dir: Path, generation_dtype: str = "auto") -> CommentedMap:
    """The contract as a ruamel ``CommentedMap`` in the schema's key order, every derived value
    commented with where it came from."""
    from ruamel.yaml.comments import CommentedMap

    doc = CommentedMap()
    doc["schema_version"] = 1
    doc["name"] = name or f"{t.name.replace('/', '-')}--{dr.name.replace('/', '-')}".lower()
    doc["description"] = f"Derived by `eagle3-conformance init` from {t.file} and {dr.file}; engine {cap.engine}."
    doc["provenance"] = _provenance(t, dr, cap, v_final)
    doc["target"] = _target(t, out_dir)
    doc["draft"] = _draft(dr, cap, out_dir)
    doc["capture"] = _capture(cap, t.d, allow_embedding)
    doc["verifier_last"] = _verifier(t.L, v_final)
    if cap.tool == "specforge":
        doc["alignment"] = CommentedMap([("feature", 0), ("input_token", 1), ("target", 1), ("loss_mask", 0),
                                         ("position", 0), ("loss_mask_reason", SPECFORGE_LOSS_MASK_REASON)])
        eol(doc, "SpecForge 0.2.0 TargetHead.preprocess: (h_t, x_t+1, F_t+1, l_t) at position t", "alignment")
        doc["training"] = CommentedMap([("tool", "specforge"), ("version", cap.version or "0.2.0")])
        eol(doc, "the specforge path runs this release's offline loader chain", "training")
    else:
        doc["alignment"] = CommentedMap([("feature", 0), ("input_token", 1), ("target", 1), ("loss_mask", 1),
                                         ("position", 1)])
        eol(doc, "speculators 0.9.0 shift_batch: (g_t, x_t+1, y_t+1, mask_t+1) at position t+1", "alignment")
    doc["norm_bands"] = _norm_bands()
    doc["precision"] = _precision(t, cap, generation_dtype)
    eol(doc, "the dtype hidden states are produced in, by the engine's dtype=auto rule (not target.dtype, the "
        "checkpoint's); every gate follows it", "precision")
    doc["gates"] = _gates(doc["precision"]["training"], doc["precision"]["serving"])
    eol(doc, "null: derived from precision, per path (docs/gates.md)", "gates")
    doc["engines"] = _engines(cap)
    doc["data_dtype"], why = _data_dtype(cap.tool, doc["precision"]["training"], generation_dtype)
    eol(doc, why, "data_dtype")
    doc["provenance"]["data_dtype"] = f"generation dtype {generation_dtype}: {why}"
    return doc


def _data_dtype(tool: str, training: str, generation_dtype: str) -> tuple[str, str]:
    """``(data_dtype, why)``: the stored dtype is what the generation server computes in
    (docs/speculators-generator.md): speculators' generator stores what its vLLM server serves, SpecForge
    what its SGLang capture runs; for a contract named by serving engine the data is assumed to be
    speculators' bf16 unless ``--generation-dtype`` says otherwise."""
    if tool == "speculators":
        return training, (f"{training}: vLLM's hidden-states connector stores what the generation server computes "
                          "in (precision.training); another server --dtype: init --generation-dtype")
    if tool == "specforge":
        return training, (f"{training}: SpecForge 0.2.0 stores what its SGLang capture computes in "
                          "(precision.training); another capture dtype: init --generation-dtype")
    if generation_dtype != "auto":
        return generation_dtype, f"{generation_dtype}: the generation server runs --dtype {generation_dtype}"
    return "bfloat16", ("bfloat16: speculators' generator against a bf16 server (a float32 checkpoint's vLLM "
                        "dtype=auto); another server --dtype: init --generation-dtype")


def _norm_output(config_file) -> Optional[bool]:
    """The draft config's top-level ``norm_output`` (Eagle3.1), None when absent or unreadable."""
    import json

    try:
        cfg = json.loads(Path(config_file).read_text())
    except (OSError, ValueError, TypeError):
        return None
    v = cfg.get("norm_output") if isinstance(cfg, dict) else None
    return bool(v) if isinstance(v, bool) else None
