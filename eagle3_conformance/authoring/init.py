"""``eagle3-conformance init``: a contract derived from the target's and the draft's ``config.json``.

Reads both configs (no weights), derives L, widths, vocab sizes, K and the draft's ids, and
translates the ids into canonical boundaries with the rule of the named engine (for SGLang: the
installed SGLang's own setter, see :mod:`eagle3_conformance.engine_ids`). Ambiguous mappings are
refused with the reason. The steps: :func:`target_facts`, :func:`draft_facts`,
:func:`choose_engine`, :func:`capture_of` (the boundaries the engine captures),
:func:`check_capture`, then :func:`build_document` (one builder per contract section).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from eagle3_conformance.authoring.configs import (
    DTYPES,
    dir_name,
    draft_ids,
    draft_method_keys,
    int_field,
    is_speculators,
    one_plus_norm,
    read_config,
)
from eagle3_conformance.authoring.yaml_doc import eol
from eagle3_conformance.core.errors import DataError, UsageError

ENGINES = ("sglang", "vllm", "speculators", "specforge")

SPECFORGE_LOSS_MASK_REASON = (
    "SpecForge 0.2.0 TargetHead.preprocess (modeling/target/target_head.py:103-108) shifts input_ids and target "
    "left by one but not loss_mask: l_t is paired with (h_t, x_t+1, F_t+1), as its trainer does "
    "(sgl-project/SpecForge#885, open)")


@dataclass
class TargetFacts:
    """What ``init`` reads from the target's config.json (``*_key``: the key it came from)."""

    file: Path
    dir: Optional[Path]
    arch: str
    L: int
    L_key: str
    d: int
    d_key: str
    V: int
    V_key: str
    model_type: str
    config_dtype: Any  # as written (None when absent)
    dtype: str
    name: str


@dataclass
class DraftFacts:
    """What ``init`` reads from the draft's config.json.

    ``width`` is the draft's hidden size (fc output); ``slot_width`` the width of one aux slot
    (fc input / K), which must equal the target's d.
    """

    file: Path
    dir: Optional[Path]
    speculators_format: bool
    arch: str
    name: str
    width: int
    width_key: str
    slot_width: int
    slot_width_key: Optional[str]
    vocab: int
    vocab_note: str
    pre_fc: str
    nested: Optional[list[int]]
    top: Optional[list[int]]
    eagle: dict = field(default_factory=dict)
    num_aux: Any = None  # num_aux_hidden_states as written


@dataclass
class CaptureFacts:
    """The boundaries an engine captures for the draft's ids, and how we know."""

    engine: str
    tool: str
    version: Optional[str]
    inferred: str
    ids: Optional[list[int]]
    location: str  # "nested" | "top_level" | "absent"
    boundaries: list
    source: str
    rule: str
    model_file: Optional[str] = None


def target_facts(cfg: dict, f: Path, d: Optional[Path]) -> TargetFacts:
    """Raises: DataError: no architectures, or no integer L / d / vocab."""
    text = cfg.get("text_config") or {}
    archs = cfg.get("architectures") or text.get("architectures")
    if not archs or not isinstance(archs, list):
        raise DataError(f"{f}: no 'architectures' list")
    L, L_key = int_field(cfg, "num_hidden_layers", f, sub="text_config")
    hd, d_key = int_field(cfg, "hidden_size", f, sub="text_config")
    V, V_key = int_field(cfg, "vocab_size", f, sub="text_config")
    model_type = str(cfg.get("model_type") or text.get("model_type") or "")
    tdt = cfg.get("torch_dtype") or cfg.get("dtype") or text.get("torch_dtype")
    return TargetFacts(f, d, str(archs[0]), L, L_key, hd, d_key, V, V_key, model_type, tdt,
                       tdt if tdt in DTYPES else "bfloat16", str(cfg.get("_name_or_path") or dir_name(d or f.parent)))


def draft_facts(cfg: dict, f: Path, d: Optional[Path], t: TargetFacts) -> DraftFacts:
    """Raises: DataError: no architectures, no width, or an aux slot width that is not the
    target's d (fc would be sized for the wrong width, fault-kinds.md K6)."""
    spec_fmt = is_speculators(cfg)
    archs = cfg.get("architectures")
    if not archs or not isinstance(archs, list):
        raise DataError(f"{f}: no 'architectures' list")
    if spec_fmt:
        tl = cfg.get("transformer_layer_config") or {}
        if not isinstance(tl.get("hidden_size"), int):
            raise DataError(f"{f}: speculators config without transformer_layer_config.hidden_size")
        dh, dh_key = int(tl["hidden_size"]), "transformer_layer_config.hidden_size"
        th = cfg.get("target_hidden_size")
        th_key = "target_hidden_size" if th is not None else None
        if th is None:  # speculators never sets it; fc is Linear(num_aux*H, H), H = verifier width
            th = t.d
    else:
        dh, dh_key = int_field(cfg, "hidden_size", f)
        th = cfg.get("target_hidden_size")
        th_key = "target_hidden_size" if th is not None else None
        if th is None:  # llama_eagle3.py:151-154: in_w = target_hidden_size if present else hidden_size
            th = dh
    if int(th) != t.d:
        raise DataError(
            f"{f}: the draft's aux slot width is {th} ({th_key or 'hidden_size, no target_hidden_size'}) "
            f"but the target hidden_size is {t.d}: fc would be sized for the wrong width (fault-kinds.md K6)")
    dv = cfg.get("draft_vocab_size")
    dv_note = "draft_vocab_size"
    if dv is None:
        dv = cfg.get("vocab_size") or (cfg.get("transformer_layer_config") or {}).get("vocab_size") or t.V
        dv_note = "draft_vocab_size null: the draft shares the target vocab (REFERENCE.md 2.2)"
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    if cfg.get("norm_before_fc") or eagle.get("norm_before_fc"):
        pre_fc = "norm_before_fc"
    elif cfg.get("fc_norm") or cfg.get("use_aux_norm"):
        pre_fc = "fc_norm"
    else:
        pre_fc = "none"
    nested, top = draft_ids(cfg)
    return DraftFacts(f, d, spec_fmt, str(archs[0]), str(cfg.get("_name_or_path") or dir_name(d or f.parent)),
                      dh, dh_key, int(th), th_key, dv, dv_note, pre_fc, nested, top, eagle,
                      cfg.get("num_aux_hidden_states"))


def draft_method(cfg: dict, f: Path) -> str:
    """The draft method a config is written for: ``eagle3``, ``dflash`` or ``mtp``, from its own
    keys (:func:`eagle3_conformance.authoring.configs.draft_method_keys`). A config with no method key is
    read as EAGLE-3 (the existing refusals for missing ids then apply).

    Raises:
        DataError: keys of two methods in one config (which one the engine would read depends on
            the engine; never guessed).
    """
    found = draft_method_keys(cfg)
    if len(found) > 1:
        what = "; ".join(f"{m}: {', '.join(keys)}" for m, keys in found.items())
        raise DataError(f"{f}: the draft config carries keys of more than one draft method ({what}); "
                        "remove the other method's keys so that every engine reads the same method")
    return next(iter(found), "eagle3")


def choose_engine(engine: Optional[str], dr: DraftFacts) -> tuple[str, str, Optional[str], str]:
    """``(engine, tool, version, why inferred)``: the named engine, or the one the draft config
    implies when that is unambiguous.

    Raises:
        UsageError: no engine named and none implied, an unknown engine, or a version that is
            malformed or whose rule is not known (:func:`eagle3_conformance.engine_ids.check_tool_version`).
    """
    from eagle3_conformance.engine_ids import TranslationError, check_tool_version, installed_sglang_version

    inferred = ""
    if engine is None:
        if dr.speculators_format:
            engine, inferred = "speculators", "speculators-format draft (Eagle3Speculator)"
        elif dr.nested is not None:
            engine = "sglang"
            inferred = (f"not named; the installed SGLang {installed_sglang_version()} was assumed because "
                        "the ids are nested (the key SGLang reads)")
        elif dr.top is not None:
            raise UsageError(f"{dr.file}: ids only at the top level and no --engine: SGLang ignores that key "
                             "(captures its defaults) while vLLM/speculators read it as boundary ids; name the engine")
        else:
            raise UsageError(f"{dr.file}: the draft config has no eagle_aux_hidden_state_layer_ids and no --engine "
                             "was named: which default applies depends on the engine (fault-kinds.md K1)")
    tool, _, version = engine.partition("==")
    tool = tool.strip().lower()
    if tool not in ENGINES:
        raise UsageError(f"--engine {engine!r}: expected sglang[==X.Y.Z], vllm, speculators or specforge")
    version = version.strip() or None
    try:
        check_tool_version(tool, version)
    except TranslationError as e:
        raise UsageError(f"--engine {engine}: {e}") from None
    return engine, tool, version, inferred


def _sglang_capture(engine: str, version: Optional[str], inferred: str, t: TargetFacts, dr: DraftFacts,
                    allow_embedding: bool) -> CaptureFacts:
    """What SGLang captures: nested ids through its setter; a top-level key or no key: its defaults."""
    from eagle3_conformance.engine_ids import SGLANG_KEY, TOP_KEY, sglang_rule

    rule = sglang_rule(t.arch, version)
    if dr.eagle.get("use_aux_hidden_state") is False:
        raise DataError(f"{dr.file}: eagle_config.use_aux_hidden_state is false: SGLang captures no aux "
                        "states and hands the draft F (width d) (fault-kinds.md K5)")
    name = dr.file.name
    if dr.nested is not None:
        ids, loc = dr.nested, "nested"
        bds = rule.boundaries(t.L, dr.nested, allow_embedding=allow_embedding)
        src = f"{name}: {SGLANG_KEY} = {dr.nested}, read by SGLang (spec_aux_hidden_state.py:185-196)"
    elif dr.top is not None:
        ids, loc = dr.top, "top_level"
        bds = rule.defaults(t.L)
        src = (f"{name}: top-level {TOP_KEY} = {dr.top} only; SGLang IGNORES a top-level key and "
               f"captures its defaults {[str(b) for b in bds]} (REFERENCE.md 3.2 'Id source'; fault-kinds.md K1)")
        if len(dr.top) != len(bds):
            raise DataError(f"{dr.file}: top-level ids {dr.top} ({len(dr.top)}) are ignored by SGLang, which "
                            f"captures {len(bds)} default slots: the draft's fc width cannot match")
    else:
        ids, loc = None, "absent"
        bds = rule.defaults(t.L)
        src = f"{name}: no ids; SGLang defaults [2, L//2, L-3] with no +1 (REFERENCE.md 3.2)"
    return CaptureFacts(engine, "sglang", rule.version, inferred, ids, loc, bds, src,
                        f"sglang=={rule.version} {rule.model_file}.py ({rule.source})", rule.model_file)


def _tool_capture(engine: str, tool: str, version: Optional[str], inferred: str, t: TargetFacts, dr: DraftFacts,
                  allow_embedding: bool) -> CaptureFacts:
    """What vLLM, speculators or SpecForge capture: their ids from the key each reads."""
    from eagle3_conformance.engine_ids import SGLANG_KEY, TOP_KEY, tool_to_boundaries

    nested, top = dr.nested, dr.top
    first = {"vllm": top, "speculators": top, "specforge": nested}[tool]
    ids = first if first is not None else None
    loc = None
    if tool == "specforge":
        if nested is not None:
            loc = "nested"
        elif top is not None:
            raise DataError(f"{dr.file}: SpecForge reads the nested key only; the top-level ids {top} "
                            "would be ignored for the default [1, L//2-1, L-4]")
    else:
        if top is not None:
            loc = "top_level"
        elif nested is not None and tool == "vllm":
            ids, loc = nested, "nested"
        elif nested is not None:
            raise DataError(f"{dr.file}: speculators reads the top-level key only; nested ids {nested} "
                            "would be ignored")
    loc = loc or "absent"
    bds = tool_to_boundaries(tool, ids, t.L, architecture=t.arch, version=version, allow_embedding=allow_embedding)
    where = {"nested": SGLANG_KEY, "top_level": f"top-level {TOP_KEY}", "absent": "no key"}[loc]
    src = f"{dr.file.name}: {where} = {ids}" if ids is not None else f"{dr.file.name}: no ids; {tool} default"
    rule = {"vllm": "vLLM boundary ids (REFERENCE.md 2.1)",
            "speculators": f"speculators{'==' + version if version else '>=0.5'} boundary ids (REFERENCE.md 5.3)",
            "specforge": "SpecForge output-of ids (REFERENCE.md 6)"}[tool]
    return CaptureFacts(engine, tool, version, inferred, ids, loc, bds, src, rule)


def _vllm_readings(engine: str, version: str, t: TargetFacts, dr: DraftFacts) -> dict:
    """Each vLLM ``version`` model runner's reading of the draft config (asked of the installed code).

    Raises:
        DataError: the runners capture different boundaries, or vLLM's loader rejects the config.
        UsageError: vLLM ``version`` is not the installed release (or none is installed).
    """
    import json

    from eagle3_conformance.engine_ids import TOP_KEY
    from eagle3_conformance.tools.vllm_cpu.ids import RUNNERS, VLLMNotAsked, read_draft

    try:
        cfg = json.loads(dr.file.read_text())
        rd = read_draft(cfg, t.L, t.arch, version)
    except VLLMNotAsked as e:
        raise UsageError(f"--engine {engine}: {e}") from None
    except ValueError as e:
        raise DataError(f"{dr.file}: vLLM {version} cannot read this draft config: {e}") from None
    got = {r: rd[r].boundaries for r in RUNNERS}
    if len(set(got.values())) != 1:
        raise DataError(f"{dr.file}: vLLM {version}'s model runners capture different boundaries for this draft: "
                        + "; ".join(f"{r} {list(b)} (reads {rd[r].config_ids})" for r, b in got.items())
                        + f". Write the ids at the top-level {TOP_KEY}, which both read first")
    return rd


def _vllm_unpinned_nested(engine: str, t: TargetFacts, dr: DraftFacts) -> None:
    """``--engine vllm`` with no version and ids only under ``eagle_config``: vLLM's model runners
    may read that key differently (0.33.0: v1 and v2 do), so the installed vLLM is asked as for a
    pinned version; with none installed a warning says the reading is unchecked.

    Raises:
        DataError: the installed vLLM's runners capture different boundaries for this draft.
    """
    import warnings

    from eagle3_conformance.environment.installed import installed_version

    inst = installed_version("vllm")
    if inst is not None:
        _vllm_readings(engine, inst, t, dr)
        return
    warnings.warn(f"{dr.file}: ids only under eagle_config and vLLM is not installed: whether every vLLM "
                  "model runner reads them cannot be asked (vLLM 0.33.0's v1 and v2 runners differ); write "
                  "the ids at the top level too, or install vLLM and pin --engine vllm==X.Y.Z", stacklevel=2)


def _vllm_capture(engine: str, version: str, inferred: str, t: TargetFacts, dr: DraftFacts) -> CaptureFacts:
    """What vLLM ``version`` captures for the draft config, asked of the installed vLLM's code for
    each model runner (:func:`eagle3_conformance.tools.vllm_cpu.ids.read_draft`).

    Raises:
        DataError: the runners capture different boundaries (the message names both and the fix),
            or vLLM's config loader rejects the draft config.
        UsageError: vLLM ``version`` is not the installed release (or none is installed).
    """
    from eagle3_conformance.core.notation import Boundary
    from eagle3_conformance.engine_ids import SGLANG_KEY, TOP_KEY
    from eagle3_conformance.tools.vllm_cpu.ids import READERS, RUNNERS

    rd = _vllm_readings(engine, version, t, dr)
    r0 = rd[RUNNERS[0]]
    if not r0.uses_aux:
        raise DataError(f"{dr.file}: eagle_config.use_aux_hidden_state is false: vLLM hands the draft F, not aux states")
    loc = "top_level" if dr.top is not None else ("nested" if dr.nested is not None else "absent")
    ids = list(r0.config_ids) if r0.config_ids is not None else None
    where = {"nested": SGLANG_KEY, "top_level": f"top-level {TOP_KEY}", "absent": "no key"}[loc]
    src = (f"{dr.file.name}: {where} = {ids}, read by both vLLM {version} runners" if ids is not None else
           f"{dr.file.name}: no ids; vLLM {version} model default {list(r0.applied)}")
    rule = f"vllm=={version} runners v1, v2 (asked of the installed code: {READERS['v1']}; {READERS['v2']})"
    return CaptureFacts(engine, "vllm", version, inferred, ids, loc, [Boundary.parse(b) for b in r0.boundaries],
                        src, rule)


def capture_of(engine: str, tool: str, version: Optional[str], inferred: str, t: TargetFacts, dr: DraftFacts,
               allow_embedding: bool) -> CaptureFacts:
    """The boundaries ``tool`` captures for the draft's ids on this target.

    Raises:
        DataError: the ids cannot be expressed, or the engine would ignore them in a way the
            draft's fc width cannot survive (the message says why).
    """
    from eagle3_conformance.engine_ids import TranslationError

    try:
        if tool == "sglang":
            return _sglang_capture(engine, version, inferred, t, dr, allow_embedding)
        if tool == "vllm" and version:
            return _vllm_capture(engine, version, inferred, t, dr)
        if tool == "vllm" and dr.top is None and dr.nested is not None:
            _vllm_unpinned_nested(engine, t, dr)
        return _tool_capture(engine, tool, version, inferred, t, dr, allow_embedding)
    except TranslationError as e:
        raise DataError(f"{dr.file}: {e}") from None


def refuse_ambiguous_ids(config_file: Path, engine: str) -> None:
    """Refuse a draft config whose two aux id lists differ (issue 41): each is read by a different engine,
    so no contract derived for ``engine`` holds for the other; ``validate`` would refuse it too.

    Raises:
        DataError: naming both keys with their lines, which engine reads which, and what to do.
    """
    from eagle3_conformance.draft_config.config_ids import ambiguous_ids

    why = ambiguous_ids(config_file)
    if why:
        tool = engine.partition("==")[0].strip().lower()
        reads, other = (("the nested key", "vLLM or speculators") if tool in ("sglang", "specforge") else
                        ("the top-level key", "SGLang or SpecForge"))
        raise DataError(f"{why}. init writes no contract from it: --engine {engine} reads {reads}, but a "
                        f"{other} run of this draft taps the other list, so one of them gets other tensors than the "
                        f"contract states. Keep one list, the ids the draft was trained on, in the key {engine} "
                        "reads (or the same list in both keys), then rerun init")


def check_capture(cap: CaptureFacts, dr: DraftFacts, allow_embedding: bool) -> None:
    """Raises: DataError: num_aux_hidden_states disagrees with K; UsageError: B_0 is captured
    without ``--allow-embedding``."""
    K = len(cap.boundaries)
    if dr.num_aux is not None and int(dr.num_aux) != K:
        raise DataError(f"{dr.file}: num_aux_hidden_states = {dr.num_aux} but {cap.engine} captures {K} slots "
                        f"{[str(b) for b in cap.boundaries]}: fc width mismatch")
    if any(b.index == 0 for b in cap.boundaries) and not allow_embedding:
        raise UsageError(f"{dr.file}: the ids capture B_0 (the embedding output); pass --allow-embedding if intended")


def derive_contract(target_arg: str, draft_arg: str, *, engine: Optional[str] = None,
                    verifier: Optional[str] = None, name: Optional[str] = None,
                    allow_embedding: bool = False, out_file: Optional[Path] = None,
                    generation_dtype: str = "auto", serving_dtype: str = "auto"):
    """Derive a contract document from two config.json files.

    Args:
        target_arg / draft_arg: a model directory or a config.json path.
        engine: ``"sglang"``, ``"sglang==X.Y.Z"``, ``"vllm"``, ``"speculators"``,
            ``"specforge"`` or None (inferred; refused when ambiguous).
        verifier: ``"B_L"`` (pre-norm, speculators convention) or ``"F"``.
        out_file: where the contract will be written (relative paths are computed from it).
        generation_dtype: the dtype the training data's generation server runs (``--generation-dtype``;
            ``auto``: the producing engine's own rule, :func:`eagle3_conformance.authoring.precision.derive`);
            it decides ``precision.training`` and, for speculators and SpecForge, ``data_dtype``.
        serving_dtype: the dtype the server is launched with (``--serving-dtype``, its ``--dtype``); ``auto``:
            the serving engine's own dtype=auto rule. It decides ``precision.serving`` (:func:`set_serving_dtype`).

    Returns:
        A ruamel ``CommentedMap`` (comments attached), ready to dump.

    Raises:
        DataError: unreadable configs, or an ambiguous / unexpressible id mapping (the message
            says why).
        UsageError: no engine named where one is needed, or an unknown engine or verifier.
    """
    tcfg, tfile, tdir = read_config(target_arg, "target")
    dcfg, dfile, ddir = read_config(draft_arg, "draft")
    t = target_facts(tcfg, tfile, tdir)
    method = draft_method(dcfg, dfile)
    if method != "eagle3":  # DFlash / MTP: eagle3_conformance.authoring.init_families.derive_any_contract
        raise UsageError(f"{dfile}: a {method} draft config; derive_contract writes EAGLE-3 contracts only "
                         "(use eagle3_conformance.authoring.init_families.derive_any_contract)")
    dr = draft_facts(dcfg, dfile, ddir, t)
    engine, tool, version, inferred = choose_engine(engine, dr)
    refuse_ambiguous_ids(dfile, engine)
    cap = capture_of(engine, tool, version, inferred, t, dr, allow_embedding)
    check_capture(cap, dr, allow_embedding)
    given = verifier is not None
    if verifier is None:
        verifier = "F" if tool == "specforge" else "B_L"
    if verifier not in ("B_L", "F", f"B_{t.L}"):
        raise UsageError(f"--verifier {verifier!r}: expected B_L or F")
    if tool == "specforge" and verifier != "F":
        raise UsageError("--verifier B_L with --engine specforge: SpecForge's offline hidden_state (the training "
                         "target) is F, post final norm (algorithms/eagle3/providers.py:141-150)")
    out_dir = Path(out_file).resolve().parent if out_file else Path.cwd()
    doc = build_document(t, dr, cap, verifier == "F", name, allow_embedding, out_dir, generation_dtype)
    if verifier == "F" and not given:  # the provenance says where F came from: SpecForge's default
        doc["provenance"]["verifier_last"] = ("F: post-final-norm (SpecForge's offline hidden_state, the "
                                              "training target; algorithms/eagle3/providers.py:141-150)")
    set_serving_dtype(doc, serving_dtype)
    return doc


SERVING_DTYPES = ("auto", "float32", "bfloat16", "float16")
"""``init --serving-dtype`` values: ``auto`` = the serving engine's own dtype=auto rule."""


def set_serving_dtype(doc, serving_dtype: str) -> None:
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


def _seq(items, flow=True):
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
                   allow_embedding: bool, out_dir: Path, generation_dtype: str = "auto"):
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
