"""``eagle3-conformance init``: a contract derived from the target's and the draft's ``config.json``.

Reads both configs (no weights), derives L, widths, vocab sizes, K and the draft's ids, and
translates the ids into canonical boundaries with the rule of the named engine (for SGLang: the
installed SGLang's own setter, see :mod:`eagle3_conformance.engine_ids`). Ambiguous mappings are
refused with the reason. The steps: :func:`target_facts`, :func:`draft_facts`,
:func:`choose_engine`, :func:`capture_of` (the boundaries the engine captures),
:func:`check_capture`, then :func:`build_document` (one builder per contract section).

This module's one job is the engine's side: which engine, and which boundaries its id rule captures
(:func:`choose_engine`, :func:`capture_of`, :func:`check_capture`), and :func:`derive_contract`, which
runs the steps. The config facts live in :mod:`eagle3_conformance.authoring.init_facts`, the document
builders in :mod:`eagle3_conformance.authoring.init_document`; their names stay importable from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from eagle3_conformance.authoring.configs import read_config
from eagle3_conformance.authoring.init_document import (  # noqa: F401 (re-exported: init_families, tests)
    SERVING_DTYPES,
    SPECFORGE_LOSS_MASK_REASON,
    _seq,
    build_document,
    set_serving_dtype,
)
from eagle3_conformance.authoring.init_facts import (  # noqa: F401 (re-exported: init_families, local_configs)
    CaptureFacts,
    DraftFacts,
    TargetFacts,
    draft_facts,
    draft_method,
    target_facts,
)
from eagle3_conformance.core.errors import DataError, UsageError

if TYPE_CHECKING:
    from ruamel.yaml.comments import CommentedMap


ENGINES = ("sglang", "vllm", "speculators", "specforge")


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
    tool, _, written = engine.partition("==")
    tool = tool.strip().lower()
    if tool not in ENGINES:
        raise UsageError(f"--engine {engine!r}: expected sglang[==X.Y.Z], vllm, speculators or specforge")
    version = written.strip() or None
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
        elif top is not None:  # ignored: SpecForge trains on its default [1, L//2-1, L-4] (check_top_level)
            loc = "top_level"
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
    if loc == "top_level" and tool == "specforge":
        ids = top
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
            return check_top_level(_sglang_capture(engine, version, inferred, t, dr, allow_embedding), t, dr)
        if tool == "specforge":
            return check_top_level(_tool_capture(engine, tool, version, inferred, t, dr, allow_embedding), t, dr)
        if tool == "vllm" and version:
            return _vllm_capture(engine, version, inferred, t, dr)
        if tool == "vllm" and dr.top is None and dr.nested is not None:
            _vllm_unpinned_nested(engine, t, dr)
        return _tool_capture(engine, tool, version, inferred, t, dr, allow_embedding)
    except TranslationError as e:
        raise DataError(f"{dr.file}: {e}") from None


def check_top_level(cap: CaptureFacts, t: TargetFacts, dr: DraftFacts) -> CaptureFacts:
    """``cap``, once a top-level-only id list is one the engine (SGLang, SpecForge: nested key only) taps
    anyway (:func:`eagle3_conformance.authoring.capture_checks.ignored_top_level`, which the gate applies too).

    Raises:
        DataError: the engine ignores the list and taps other boundaries (K1); the message says what to write.
    """
    from eagle3_conformance.authoring.capture_checks import ignored_top_level

    if cap.location == "top_level" and dr.top is not None:
        why = ignored_top_level(dr.file, dr.top, t.L, cap.tool, cap.boundaries, architecture=t.arch,
                                version=cap.version)
        if why:
            raise DataError(f"{why}. init writes no contract from it")
    return cap


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
    from eagle3_conformance.authoring.capture_checks import num_aux_problem

    why = num_aux_problem(dr, cap.boundaries, f"{cap.engine} captures")
    if why:
        raise DataError(why)
    if any(b.index == 0 for b in cap.boundaries) and not allow_embedding:
        raise UsageError(f"{dr.file}: the ids capture B_0 (the embedding output); pass --allow-embedding if intended")


def derive_contract(target_arg: str, draft_arg: str, *, engine: Optional[str] = None,
                    verifier: Optional[str] = None, name: Optional[str] = None,
                    allow_embedding: bool = False, out_file: Optional[Path] = None,
                    generation_dtype: str = "auto", serving_dtype: str = "auto") -> CommentedMap:
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
    from eagle3_conformance.authoring.capture_checks import role_problem
    from eagle3_conformance.draft_config.config_ids import non_integer_ids

    tcfg, tfile, tdir = read_config(target_arg, "target")
    dcfg, dfile, ddir = read_config(draft_arg, "draft")
    role = role_problem(tcfg, tfile, dcfg, dfile)  # the gate's words (local_configs.config_problems)
    why = ([role[1]] if role else []) + non_integer_ids(dfile)  # validate's words (config_ids.id_problems)
    if why:
        raise DataError("\n".join(why))
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
