"""The draft-config checks ``init`` applies before it derives a contract, and the contract gate
(:mod:`eagle3_conformance.authoring.gate`, so ``validate``, the pytest plugin and every verb) applies to
the configs at ``target.path`` / ``draft.path``: one function per check, called by both, so both say the
same thing (the project's one-verdict rule).

- :func:`ignored_top_level`: a draft config whose only aux id list is the top-level key, served or trained
  by an engine that reads the nested key only (SGLang, SpecForge), where that engine's defaults are not the
  boundaries the top-level list names (fault-kinds.md K1); :func:`contract_top_level_problems` is its gate side.
- :func:`num_aux_problem`: ``num_aux_hidden_states`` against the aux slots captured (the fc width).
- :func:`not_a_draft`: the config given as the draft is a full model (many layers, no draft key).

Pure: reads the config's text for line numbers; engine rules are asked through
:mod:`eagle3_conformance.engine_ids` (SGLang only where the caller names it). Nothing imports torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

NESTED_READERS = {"sglang": "SGLang", "specforge": "SpecForge"}
"""Tools that read only the nested ``eagle_config.eagle_aux_hidden_state_layer_ids`` (SGLang 0.5.23
``spec_aux_hidden_state.py:185-196``; SpecForge 0.2.0 ``resolve_eagle_capture_layers``) and tap their
defaults when it is absent."""


def _line(f: Path, key: tuple[str, ...]) -> str:
    from eagle3_conformance.draft_config.config_ids import key_lines

    try:
        return str(key_lines(f.read_text()).get(key, "?"))
    except OSError:
        return "?"


def ignored_top_level(f: Path, top: Sequence, L: int, tool: str, taps: Sequence, *, architecture: str,
                      version: Optional[str] = None) -> Optional[str]:
    """Why a draft config whose only id list is the top-level key cannot be run by ``tool``; None when
    ``tool`` reads the top-level key, or when the boundaries that list names (vLLM and speculators read
    it: id k = B_k, REFERENCE.md 2.1, 5.3) are the ones ``tool`` taps (``taps``, its defaults).

    Args:
        f: the draft's ``config.json`` (its key's line is named).
        top: the top-level ``eagle_aux_hidden_state_layer_ids`` as written.
        L: the target's ``num_hidden_layers``.
        tool: ``sglang``, ``specforge`` (checked), or another tool (None).
        taps: what ``tool`` captures with no nested key: its defaults, asked of its rule.
        architecture / version: for the ids ``tool`` would need (:func:`eagle3_conformance.engine_ids.boundaries_to_tool`).

    Returns:
        One line naming the file and line, which key each engine reads, what ``tool`` taps, and what to write.
    """
    from eagle3_conformance.core.notation import Boundary
    from eagle3_conformance.engine_ids import SGLANG_KEY, TOP_KEY, TranslationError, boundaries_to_tool

    name = NESTED_READERS.get(tool)
    if name is None or not isinstance(top, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                            and 0 <= i <= L for i in top):
        return None  # a tool that reads the key, or ids the id checks refuse with their own words
    named = [Boundary(i) for i in top]
    tapped = [Boundary.parse(str(b)) for b in taps]
    if named == tapped:
        return None
    shown = [str(b) for b in named]
    try:
        ids = boundaries_to_tool(tool, named, L, architecture=architecture, version=version).ids
        fix = (f"if the draft was trained on {shown}, move them to the key {name} reads: \"eagle_config\": "
               f"{{\"eagle_aux_hidden_state_layer_ids\": {list(ids)}}} ({name}'s ids for {shown}) in place of the "
               f"top-level list; if it was trained on {[str(b) for b in tapped]}, write that top-level list as "
               f"{[b.index for b in tapped]}")
    except TranslationError as e:
        fix = f"{name} cannot be made to tap {shown} ({e}); serve or train this draft with vLLM or speculators"
    return (f"{f}:{_line(f, (TOP_KEY,))}: {TOP_KEY} = {list(top)} is the only aux id list, at the top level: "
            f"vLLM and speculators read it ({shown}), but {name} reads only {SGLANG_KEY}, ignores this list and "
            f"taps its defaults {[str(b) for b in tapped]} instead (fault-kinds.md K1): {fix}")


def contract_top_level_problems(c, dr) -> list[tuple[tuple, str]]:
    """:func:`ignored_top_level` for a contract (the gate): each tool it names that reads the nested key only
    (SGLang: ``engines.sglang_validated`` / ``engines.sglang_model_file``; SpecForge: ``training.tool``), with
    that tool's defaults asked of its rule (the contract's ``capture.boundaries`` where SGLang is not here to
    ask). ``dr``: the draft config's facts (:func:`eagle3_conformance.authoring.init_facts.draft_facts`)."""
    from eagle3_conformance.engine_ids import TranslationError, tool_to_boundaries

    if dr.top is None or dr.nested is not None:
        return []
    named = []
    if c.engines.sglang_validated or c.engines.sglang_model_file:
        named.append(("sglang", c.engines.sglang_validated[-1] if c.engines.sglang_validated else None))
    if c.training.tool == "specforge":
        named.append(("specforge", c.training.version))
    out = []
    for tool, version in named:
        try:
            taps = tool_to_boundaries(tool, None, c.L, architecture=c.target.architecture, version=version)
        except TranslationError:
            taps = list(c.capture.boundaries)
        why = ignored_top_level(dr.file, dr.top, c.L, tool, taps, architecture=c.target.architecture,
                                version=version)
        if why:
            out.append((("draft", "layer_ids", "values"), why))
    return out



def num_aux_problem(dr, boundaries: Sequence, who: str) -> Optional[str]:
    """Why the draft config's ``num_aux_hidden_states`` cannot be the number of aux slots ``who`` captures
    (``boundaries``): the draft's fc is built for ``num_aux_hidden_states x target_hidden_size`` inputs, the
    concat is ``len(boundaries)`` slots wide (R41: a 4-slot draft, fc built for 3). None when it agrees or is
    absent. ``dr``: :class:`eagle3_conformance.authoring.init_facts.DraftFacts`."""
    n = dr.num_aux
    if n is None:
        return None
    K = len(boundaries)
    where = f"{dr.file}:{_line(dr.file, ('num_aux_hidden_states',))}: num_aux_hidden_states = {n!r}"
    if isinstance(n, bool) or not isinstance(n, int):
        return f"{where} is not an integer slot count"
    if n == K:
        return None
    return f"{where} but {who} {K} slots {[str(b) for b in boundaries]}: fc width mismatch"


def _layers(cfg: dict) -> Optional[int]:
    n = cfg.get("num_hidden_layers", (cfg.get("text_config") or {}).get("num_hidden_layers")
                if isinstance(cfg.get("text_config"), dict) else None)
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def _arch(cfg: dict) -> str:
    a = cfg.get("architectures")
    return str(a[0]) if isinstance(a, list) and a else "no architectures"


def not_a_draft(cfg: dict, f: Path) -> Optional[str]:
    """Why the config given as an EAGLE-3 draft is a full model instead: no key of any draft method
    (:func:`eagle3_conformance.authoring.configs.draft_method_keys`: no ``eagle_config``, no aux id list, no
    ``*Eagle3*`` / ``*DFlash*`` architecture, no ``speculators_config``) and more than one decoder layer (an
    EAGLE-3 draft has one; exports that carry no EAGLE key, such as EAGLE's own, have one). None otherwise."""
    from eagle3_conformance.authoring.configs import draft_method_keys, is_speculators

    n = _layers(cfg)
    if draft_method_keys(cfg) or is_speculators(cfg) or n is None or n <= 1:
        return None
    return (f"{f}: not an EAGLE-3 draft: a full {_arch(cfg)} with num_hidden_layers = {n} and no draft key "
            "(eagle_config, eagle_aux_hidden_state_layer_ids, an *Eagle3* architecture, speculators_config); "
            "the draft's config is the EAGLE-3 head's own (one decoder layer)")


def _draft_like(cfg: dict) -> list[str]:
    """The draft keys of a config (EAGLE-3 or DFlash method keys, the speculators format); empty for a model."""
    from eagle3_conformance.authoring.configs import draft_method_keys, is_speculators

    keys = draft_method_keys(cfg)
    out = keys.get("eagle3", []) + keys.get("dflash", [])
    return out + (["speculators_config"] if is_speculators(cfg) and not out else [])


def role_problem(tcfg: Optional[dict], tfile: Optional[Path], dcfg: Optional[dict], dfile: Optional[Path], *,
                 names: tuple[str, str] = ("--target", "--draft")) -> Optional[tuple[str, str]]:
    """Whether the configs given as the target and the draft are what they are given as: ``(role, message)``
    with role ``"target"`` or ``"draft"``, or None. Refused: a target config with draft keys (an EAGLE-3 /
    DFlash architecture, ``eagle_config``, ``speculators_config``), saying "swapped?" when the draft config is a
    full model (:func:`not_a_draft`); a draft config that is a full model. Either config may be None (not here).
    ``names``: how the caller names the two (``init``'s flags, or the contract's ``target.path`` / ``draft.path``)."""
    full = not_a_draft(dcfg, dfile) if dcfg is not None and dfile is not None else None
    keys = _draft_like(tcfg) if tcfg is not None else []
    if keys:
        n = _layers(tcfg or {})
        what = f"{tfile} ({names[0]}) is a draft ({', '.join(keys)}" + (f"; num_hidden_layers = {n})" if n else ")")
        if full:
            return "target", (f"{what} and {dfile} ({names[1]}) is a full model ({_arch(dcfg or {})}, "
                              f"num_hidden_layers = {_layers(dcfg or {})}, no draft key): {names[0]} and {names[1]} "
                              f"swapped? {names[0]} is the model whose hidden states the draft reads, {names[1]} the "
                              "draft")
        return "target", f"{what}, not the model whose hidden states the draft reads"
    return ("draft", full) if full else None
