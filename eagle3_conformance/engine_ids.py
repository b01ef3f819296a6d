"""Translation rules between canonical boundaries (``B_k``) and each tool's layer-id integers.

A contract stores boundaries; every tool's integers are derived from them here, and read back
through the same rules (docs/REFERENCE.md sections 2.1-2.3, 3.2, 5.3, 6).

SGLang: the rule is *asked of the installed SGLang's own code*. The target model class is found
through SGLang's model registry (``sglang/srt/models/registry.py`` ``ModelRegistry``; every
model module's ``EntryClass``), and its ``set_eagle3_layers_to_capture`` is called unbound on a
stub object holding only the attributes the setters touch (``pp_group.is_last_rank``,
``config.num_hidden_layers``, ``model.layers_to_capture``, and for delegating wrappers such as
``kimi_k25.py:928-939`` a ``language_model``) -- the way SGLang's per-model setter unit tests
pin ``layers_to_capture``. What the resulting ``layers_to_capture`` list captures follows the
capture loop (``srt/models/llama.py:481-494``, ``deepseek_v2.py:3175-3208``): entry i is the
residual stream entering layer i = ``B_i`` for 0 <= i < L, in layer (ascending) order with
duplicates collapsed; i = L is reachable only in files that also capture at the final norm
(``gpt_oss.py:732-735``, ``minimax_m3.py:1962``, ``laguna.py:606``, ``nemotron_h.py:895``),
detected from the module source. For SGLang releases other than the installed one, only the
rules REFERENCE.md states per release are known (llama family: +1 in every release;
``deepseek_v2.py``: +1 in 0.5.5-0.5.12, first-id rule from 0.5.13, sgl-project/sglang#25454);
anything else is refused.

Other tools (fixed conventions, no code installed to ask):

- vLLM: id i = ``B_i`` (0..L in mixin models), top-level key (newer releases also nested). With a
  pinned release (``vllm==0.33.0``) the installed vLLM's own readers and setter are asked instead
  (:mod:`eagle3_conformance.tools.vllm_cpu.ids`; only in the vLLM environment, ``tox -e vllm``).
- speculators >= 0.5: id i = ``B_i``; training ids at the top level of the speculators config,
  data generation list = aux ids + [L] (``scripts/launch_vllm.py:69-143``); 0.3/0.4: output-of
  ids, data generation list appended with L-1.
- SpecForge: output-of ids (i = ``B_{i+1}``), nested ``eagle_config``; exactly 3 unique
  non-negative ids (``specforge/algorithms/model_providers.py:188-210``).
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass, field
from functools import lru_cache
from types import MethodType, SimpleNamespace
from typing import Any, Callable, Optional, Sequence

from eagle3_conformance.notation import Boundary, engine_default_aux_ids

TOOLS = ("sglang", "vllm", "speculators", "specforge")

SGLANG_KEY = "eagle_config.eagle_aux_hidden_state_layer_ids"
TOP_KEY = "eagle_aux_hidden_state_layer_ids"


class TranslationError(ValueError):
    """A tool cannot express the boundaries, or the mapping is ambiguous or unknown. The message
    is one line and says why."""


# --- SGLang ---------------------------------------------------------------------------------

# Wrappers whose setter delegates to an inner language model (attribute, inner class name).
# kimi_k25.py:691-694 builds `self.language_model = DeepseekV3ForCausalLM(config.text_config)`,
# kimi_k25.py:928-939 forwards set_eagle3_layers_to_capture to it.
_DELEGATES = {"KimiK25ForConditionalGeneration": ("language_model", "DeepseekV3ForCausalLM")}

# Model files whose explicit ids get +1 in every release (REFERENCE.md section 3.2 table, 2.1).
_PLUS_ONE_FILES = {
    "llama", "qwen2", "qwen3", "qwen2_5_vl", "qwen3_vl", "glm4_moe", "glm5_next", "bailing_moe",
    "longcat_flash", "minimax_m2", "gemma3_causal", "gemma3_mm", "gemma4_causal", "gemma4_mm",
    "qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5", "minimax_m3",
}

_FINAL_CAPTURE_RE = re.compile(r"(end_layer|len\(self\.layers\))\s+in\s+self\.layers_to_capture")


def installed_sglang_version() -> Optional[str]:
    """The installed SGLang version (from package metadata, no import), or None."""
    from eagle3_conformance.installed import installed_version

    return installed_version("sglang")


def _vkey(v: str) -> tuple:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(v).release
    except InvalidVersion:
        raise TranslationError(f"not a version: {v!r}") from None


@lru_cache(maxsize=None)
def _registry_class(architecture: str):
    """The SGLang model class registered for ``architecture`` (None when unknown)."""
    from eagle3_conformance import torch_env

    torch_env.prepare()
    import logging

    # the registry imports every model module once and logs CUDA-only ones it skips
    logging.getLogger("sglang.srt.models.registry").setLevel(logging.ERROR)
    from sglang.srt.models.registry import ModelRegistry

    return ModelRegistry.models.get(architecture)


class _ModelStub:
    """Stands in for ``XForCausalLM.model``: records ``layers_to_capture`` whether the setter
    assigns it or calls the inner model's own setter (``qwen3_moe.py:1128-1143``)."""

    def __init__(self) -> None:
        self.layers_to_capture: Optional[list[int]] = None

    def set_eagle3_layers_to_capture(self, layers_to_capture):
        self.layers_to_capture = list(layers_to_capture)


def _stub(num_layers: int) -> SimpleNamespace:
    return SimpleNamespace(
        pp_group=SimpleNamespace(is_last_rank=True),
        config=SimpleNamespace(num_hidden_layers=num_layers),
        model=_ModelStub(),
        capture_aux_hidden_states=False,
    )


@dataclass(frozen=True)
class SGLangRule:
    """How one SGLang release maps draft-config ids to captured boundaries for one target class.

    Attributes:
        architecture: target ``architectures[0]``.
        model_file: SGLang model module the rule comes from, e.g. ``"deepseek_v2"``.
        model_class: qualified class whose setter is used.
        version: the SGLang release the rule holds for.
        source: ``"installed setter ..."`` or ``"known rule ..."`` (with citation).
        captures_final: whether layers_to_capture entry L (B_L, final norm) is reachable.
    """

    architecture: str
    model_file: str
    model_class: str
    version: str
    source: str
    captures_final: bool
    apply: Callable[[int, Optional[list[int]]], list[int]] = field(repr=False, compare=False)

    def layers_to_capture(self, num_layers: int, ids: Optional[Sequence[int]]) -> list[int]:
        """``model.layers_to_capture`` after ``set_eagle3_layers_to_capture(ids)`` (None: no ids)."""
        return list(self.apply(num_layers, None if ids is None else [int(i) for i in ids]))

    def boundaries(self, num_layers: int, ids: Optional[Sequence[int]], *,
                   allow_embedding: bool = False) -> list[Boundary]:
        """The boundaries SGLang captures for ``ids``, in concat order.

        Raises:
            TranslationError: SGLang would drop (out of range / unreachable), reorder (not
                ascending) or collapse (duplicate) an entry, or an id reaches B_0 (``-1`` under a
                +1 rule; raw 0 without ``allow_embedding``). Any of these makes the list mean
                something other than it says, so no contract is derived from it.
        """
        L = num_layers
        ltc = self.layers_to_capture(L, ids)
        where = f"sglang {self.version} {self.model_file}.py"
        shown = f"ids {list(ids)} -> layers_to_capture {ltc}" if ids is not None else f"default layers_to_capture {ltc}"
        hi = L if self.captures_final else L - 1
        bad = [i for i in ltc if i < 0 or i > hi]
        if bad:
            what = "raises (AuxHiddenStatePacker count check)" if self.model_file == "deepseek_v2" else "drops them silently"
            raise TranslationError(f"{where}: {shown}: entries {bad} are outside 0..{hi} (B_{L} is "
                                   f"{'reachable' if self.captures_final else 'unreachable'} here); SGLang {what}")
        if len(set(ltc)) != len(ltc):
            raise TranslationError(f"{where}: {shown}: duplicates collapse into one slot")
        if ltc != sorted(ltc):
            raise TranslationError(f"{where}: {shown}: SGLang concatenates in layer order "
                                   f"{sorted(ltc)}, not list order")
        if 0 in ltc:
            if ids is not None and -1 in ids:
                raise TranslationError(f"{where}: {shown}: id -1 reaches B_0 (the embedding) under the +1 "
                                       "rule; refusing (REFERENCE.md 2.2, FAULTS.md K2)")
            if not allow_embedding:
                raise TranslationError(f"{where}: {shown}: captures B_0 (the embedding output); pass "
                                       "allow_embedding if that is intended (FAULTS.md K2)")
        return [Boundary(i) for i in ltc]

    def defaults(self, num_layers: int) -> list[Boundary]:
        """Boundaries captured when the draft config gives no ids."""
        return self.boundaries(num_layers, None)


def _installed_rule(architecture: str, version: str) -> SGLangRule:
    cls = _registry_class(architecture)
    if cls is None:
        raise TranslationError(f"sglang {version} has no model class registered for architecture "
                               f"{architecture!r} (sglang.srt.models.registry.ModelRegistry)")
    if not hasattr(cls, "set_eagle3_layers_to_capture"):
        raise TranslationError(f"sglang {version}: {cls.__module__}.{cls.__name__} has no "
                               "set_eagle3_layers_to_capture (no EAGLE-3 support)")
    inner_cls = None
    if cls.__name__ in _DELEGATES:
        attr, inner_name = _DELEGATES[cls.__name__]
        inner_cls = _registry_class(inner_name)
    rule_mod = inner_cls.__module__ if inner_cls is not None else cls.__module__
    src = inspect.getsource(importlib.import_module(rule_mod))
    captures_final = bool(_FINAL_CAPTURE_RE.search(src))
    setter = cls.set_eagle3_layers_to_capture
    try:
        line = inspect.getsourcelines(
            (inner_cls or cls).set_eagle3_layers_to_capture)[1]
    except (OSError, TypeError):
        line = 0

    def apply(num_layers: int, ids: Optional[list[int]]) -> list[int]:
        outer = _stub(num_layers)
        rec = outer
        if inner_cls is not None:
            inner = _stub(num_layers)
            inner.set_eagle3_layers_to_capture = MethodType(inner_cls.set_eagle3_layers_to_capture, inner)
            setattr(outer, _DELEGATES[cls.__name__][0], inner)
            rec = inner
        try:
            setter(outer, ids)
        except AttributeError as e:
            raise TranslationError(f"sglang {version}: {cls.__name__}.set_eagle3_layers_to_capture needs "
                                   f"attributes the stub lacks ({e}); no rule derived") from None
        if rec.model.layers_to_capture is None:
            raise TranslationError(f"sglang {version}: {cls.__name__}.set_eagle3_layers_to_capture did not "
                                   "set layers_to_capture on the stub; no rule derived")
        return list(rec.model.layers_to_capture)

    file = rule_mod.rsplit(".", 1)[-1]
    return SGLangRule(architecture, file, f"{(inner_cls or cls).__module__}.{(inner_cls or cls).__name__}",
                      version, f"installed setter sglang/srt/models/{file}.py:{line} called on a stub",
                      captures_final, apply)


#: the newest SGLang release whose per-file id rules REFERENCE.md records
_NEWEST_KNOWN = (0, 5, 23)


def _known_rule(architecture: str, version: str, installed: SGLangRule) -> SGLangRule:
    """A rule for a release that is not installed, from REFERENCE.md's per-release facts."""
    vk = _vkey(version)
    file = installed.model_file
    if vk > _NEWEST_KNOWN:
        raise TranslationError(f"sglang {version} is newer than {'.'.join(map(str, _NEWEST_KNOWN))}, the newest "
                               f"release whose id rules are recorded (REFERENCE.md 3.2), and it is not installed "
                               f"(installed: {installed.version}): install it so that its own setter can be asked")

    default = engine_default_aux_ids

    if file in _PLUS_ONE_FILES:
        def apply(L, ids):
            return default(L) if ids is None else [v + 1 for v in ids]
        src = "known rule: +1 on explicit ids in every release (REFERENCE.md 2.1, 3.2)"
    elif file == "deepseek_v2" and vk >= (0, 5, 13):
        def apply(L, ids):
            if ids is None:
                return default(L)
            return [v + 1 for v in ids] if ids and ids[0] == 1 else list(ids)
        src = "known rule: first-id rule from 0.5.13 (sgl-project/sglang#25454; REFERENCE.md 3.2)"
    elif file == "deepseek_v2" and (0, 5, 5) <= vk < (0, 5, 13):
        def apply(L, ids):
            return default(L) if ids is None else [v + 1 for v in ids]
        src = "known rule: +1 always in 0.5.5-0.5.12 (REFERENCE.md 3.2 History)"
    else:
        raise TranslationError(f"sglang {version} is not installed (installed: {installed.version}) and no "
                               f"rule is known for {file}.py at that release; install it or name the "
                               "installed version")
    return SGLangRule(architecture, file, installed.model_class, version, src,
                      installed.captures_final and file != "deepseek_v2", apply)


def sglang_rule(architecture: str, version: Optional[str] = None) -> SGLangRule:
    """The SGLang id rule for a target architecture at ``version`` (default: installed).

    Raises:
        TranslationError: SGLang is not installed, the architecture is unknown to it, or no rule
            is known for a release that is not installed.
    """
    inst = installed_sglang_version()
    if inst is None:
        raise TranslationError("sglang is not installed: its id rule cannot be asked of its code")
    rule = _installed_rule(architecture, inst)
    if version is None or _vkey(version) == _vkey(inst):
        return rule
    return _known_rule(architecture, version, rule)


def sglang_ids_for(rule: SGLangRule, num_layers: int, boundaries: Sequence[Boundary], *,
                   allow_embedding: bool = False) -> tuple[list[int], list[list[int]]]:
    """Integers to write in the draft's nested key so that ``rule`` captures exactly
    ``boundaries`` in order. Candidates (output-of ``b-1``, then raw ``b``) are run through the
    rule and kept only if they map back exactly.

    Returns:
        (preferred ids, every working candidate).

    Raises:
        TranslationError: no integer list makes this SGLang file capture these boundaries.
    """
    want = [Boundary.parse(b) for b in boundaries]
    ok: list[list[int]] = []
    reasons = []
    for cand in ([b.index - 1 for b in want], [b.index for b in want]):
        if cand in ok:
            continue
        try:
            got = rule.boundaries(num_layers, cand, allow_embedding=allow_embedding)
        except TranslationError as e:
            reasons.append(str(e))
            continue
        if got == want:
            ok.append(cand)
        else:
            reasons.append(f"ids {cand} capture {[str(b) for b in got]}")
    if not ok:
        raise TranslationError(f"sglang {rule.version} {rule.model_file}.py cannot capture "
                               f"{[str(b) for b in want]}: " + "; ".join(reasons))
    return ok[0], ok


# --- translations for every tool -------------------------------------------------------------


@dataclass
class ToolIds:
    """What one tool needs to capture a contract's boundaries.

    Attributes:
        tool: "sglang", "vllm", "speculators" or "specforge".
        holds_for: the release(s) the rule holds for, with its source.
        ids: the integers to write.
        key_path: where they go (config file and key path).
        convention: "output_of" (i -> B_{i+1}), "boundary" (i -> B_i), or an SGLang file rule.
        extra: tool-specific extras (e.g. speculators' data-generation list), name -> value.
        notes: caveats in words.
    """

    tool: str
    holds_for: str
    ids: list[int]
    key_path: str
    convention: str
    extra: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"tool": self.tool, "holds_for": self.holds_for, "ids": self.ids,
                "key_path": self.key_path, "convention": self.convention, "extra": self.extra,
                "notes": self.notes}


def _check_tool(tool: str) -> None:
    if tool not in TOOLS:
        raise TranslationError(f"unknown tool {tool!r}; expected one of {', '.join(TOOLS)}")


# The releases whose id rule this tool knows without asking an installed copy (REFERENCE.md 5.3:
# speculators 0.3/0.4 output-of ids, boundary ids from 0.5 to 0.9.0, the pinned release; REFERENCE.md
# 6: SpecForge 0.2.0, the PyPI wheel). SGLang's range is checked by :func:`sglang_rule`, vLLM's by
# asking the installed code (:mod:`eagle3_conformance.tools.vllm_cpu.ids`).
_KNOWN_RELEASES = {"speculators": ((0, 3), (0, 9, 0), "0.3.0 to 0.9.0"),
                   "specforge": ((0, 2, 0), (0, 2, 0), "0.2.0")}


def check_tool_version(tool: str, version: Optional[str]) -> None:
    """Refuse a release the tool cannot speak for, before any rule is applied.

    Args:
        tool: one of :data:`TOOLS`.
        version: the release asked for (``"0.9.0"``); None: the tool's default, always accepted.

    Raises:
        TranslationError: ``version`` is not a PEP 440 version, or (speculators, SpecForge) it is
            outside the releases whose rule is recorded; the message names the known ones.
    """
    if version is None:
        return
    vk = _vkey(version)
    known = _KNOWN_RELEASES.get(tool)
    if known is None:
        return
    lo, hi, words = known
    pad = lambda k: k + (0,) * (3 - len(k))  # noqa: E731 - (0, 9) == (0, 9, 0)
    if not pad(lo) <= pad(vk) <= pad(hi):
        raise TranslationError(f"{tool} {version}: no id rule is known for this release (known: {words}; "
                               "docs/REFERENCE.md)")


def boundaries_to_tool(tool: str, boundaries: Sequence[Boundary | str], num_layers: int, *,
                       architecture: str = "LlamaForCausalLM", version: Optional[str] = None,
                       verifier: Boundary | str | None = None,
                       allow_embedding: bool = False) -> ToolIds:
    """Translate aux boundaries into ``tool``'s integers.

    Args:
        tool: one of :data:`TOOLS`.
        boundaries: aux slots, ascending, e.g. ``["B_2", "B_16", "B_29"]``.
        num_layers: L.
        architecture: target ``architectures[0]`` (SGLang rules are per model file).
        version: tool release (SGLang: default installed; speculators: default 0.9.0).
        verifier: the contract's ``verifier_last`` (``B_L`` or ``F``), for speculators' data
            generation list.
        allow_embedding: whether B_0 may be an aux slot.

    Raises:
        TranslationError: the tool cannot express a boundary (B_0 in output-of ids, F as an aux
            id, K != 3 for SpecForge, F as speculators' verifier), or no rule is known.
    """
    _check_tool(tool)
    check_tool_version(tool, version)
    bs = [Boundary.parse(b) for b in boundaries]
    L = num_layers
    if any(b.final for b in bs):
        raise TranslationError("F is not an aux boundary and has no layer id in any tool")
    if any(b.index > L for b in bs):
        raise TranslationError(f"boundaries {[str(b) for b in bs]} go beyond B_{L}")
    return _TO_TOOL[tool](bs, L, architecture=architecture, version=version, verifier=verifier,
                          allow_embedding=allow_embedding)


def _to_sglang(bs: list[Boundary], L: int, *, architecture: str, version: Optional[str], verifier,
               allow_embedding: bool) -> ToolIds:
    """SGLang: the ids its per-model-file setter turns into these boundaries (nested key)."""
    rule = sglang_rule(architecture, version)
    ids, alts = sglang_ids_for(rule, L, bs, allow_embedding=allow_embedding)
    notes = [f"SGLang reads only the draft config's nested key (spec_aux_hidden_state.py:185-196); a "
             "top-level key is ignored and the defaults "
             f"{[str(b) for b in rule.defaults(L)]} are captured silently (FAULTS.md K1)"]
    others = [a for a in alts if a != ids]
    if others:
        notes.append(f"also captures the same boundaries in this release: {others}")
    if rule.model_file == "deepseek_v2":
        notes.append("deepseek_v2.py changed its rule at 0.5.13 (+1 always before, first-id rule after); "
                     "run `eagle3-conformance translate --engine-version` for each release you serve")
    return ToolIds("sglang", f"sglang=={rule.version} ({rule.source})", ids,
                   f"draft config.json: {SGLANG_KEY} (and eagle_config.use_aux_hidden_state: true)",
                   f"sglang {rule.model_file}.py setter", notes=notes)


def _vllm_asked(bs: list[Boundary], L: int, architecture: str, version: str, allow_embedding: bool) -> ToolIds:
    """vLLM ``version``, asked of the installed code (:mod:`eagle3_conformance.tools.vllm_cpu.ids`): the
    boundary ids written at the top level must give ``bs`` on every model runner; the nested-only
    placement is asked too and reported when a runner ignores it."""
    from eagle3_conformance.tools.vllm_cpu.ids import READERS, RUNNERS, VLLMNotAsked, read_draft

    if any(b.index == 0 for b in bs) and not allow_embedding:
        raise TranslationError("B_0 (embedding) is an aux slot but embedding capture is not allowed")
    ids = [b.index for b in bs]
    want = tuple(str(b) for b in bs)
    base = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1}
    try:
        top = read_draft({**base, TOP_KEY: ids, "eagle_config": {"use_aux_hidden_state": True}}, L, architecture,
                         version)
        nested = read_draft({**base, "eagle_config": {TOP_KEY: ids, "use_aux_hidden_state": True}}, L, architecture,
                            version)
    except VLLMNotAsked as e:
        raise TranslationError(str(e)) from None
    bad = {r: top[r].boundaries for r in RUNNERS if top[r].boundaries != want}
    if bad:
        raise TranslationError(f"vLLM {version}: top-level ids {ids} capture "
                               + "; ".join(f"{r}: {list(b)}" for r, b in bad.items()) + f", not {list(want)}")
    notes = [f"asked of vLLM {version}'s code: " + "; ".join(f"{r} {READERS[r]}" for r in RUNNERS),
             "the setter sorts and de-duplicates the ids (interfaces.py:1616-1617): the concat is ascending"]
    for r in RUNNERS:
        if nested[r].boundaries != want:
            notes.append(f"the same ids only under eagle_config: the {r} runner captures "
                         f"{list(nested[r].boundaries)} (its reader ignores the nested key; no warning, "
                         "vllm-project/vllm#50170)")
    notes.append("the draft's fc is sized from num_aux_hidden_states, else the NESTED ids' count, else 3 "
                 "(llama_eagle3.py:209-221): with K != 3 top-level ids set num_aux_hidden_states")
    return ToolIds("vllm", f"vllm=={version}, model runners v1 and v2 (asked of the installed code)", ids,
                   f"draft config.json: {TOP_KEY} (top level)", "boundary",
                   extra={"runners": {r: list(top[r].boundaries) for r in RUNNERS}}, notes=notes)


def _to_vllm(bs: list[Boundary], L: int, *, architecture: str, version: Optional[str], verifier,
             allow_embedding: bool) -> ToolIds:
    """vLLM: boundary ids under the top-level key. With ``version`` the installed vLLM's own code is
    asked (:func:`_vllm_asked`); without, the convention REFERENCE.md 2.1 states."""
    if version is not None:
        return _vllm_asked(bs, L, architecture, version, allow_embedding)
    notes = ["vLLM reads the top-level key (newer releases also the nested one); a missing key falls "
             "back silently to (2, L//2, L-3) (vllm-project/vllm#50170)"]
    if any(b.index == 0 for b in bs):
        if not allow_embedding:
            raise TranslationError("B_0 (embedding) is an aux slot but embedding capture is not allowed")
        notes.append("id 0 (B_0) works only in SupportsEagle3 mixin models; old llama.py crashes")
    if any(b.index == L for b in bs):
        notes.append(f"id {L} (B_{L}) is reached by mixin models; older DeepSeek files stop at L-1 "
                     "(vllm-project/vllm#46788, #46973)")
    return ToolIds("vllm", "vLLM, boundary ids (REFERENCE.md 2.1; no release pinned there)",
                   [b.index for b in bs], f"draft config.json: {TOP_KEY} (top level)", "boundary",
                   notes=notes)


def _to_speculators(bs: list[Boundary], L: int, *, architecture: str, version: Optional[str], verifier,
                    allow_embedding: bool) -> ToolIds:
    """speculators: output-of ids for 0.3/0.4 data generation, boundary ids from 0.5."""
    ver = version or "0.9.0"
    old = _vkey(ver) < (0, 5)
    v = Boundary.parse(verifier) if verifier is not None else Boundary(L)
    if v.final:
        raise TranslationError("speculators stores B_L (pre-norm) as the verifier slot and applies "
                               "verifier_norm in training; it cannot store F (REFERENCE.md 5.3)")
    if old:
        if any(b.index == 0 for b in bs):
            raise TranslationError("B_0 cannot be expressed in speculators 0.3/0.4 output-of ids (it would be -1)")
        ids = [b.index - 1 for b in bs]
        gen = ids + [L - 1]
        return ToolIds("speculators", f"speculators=={ver} (0.3/0.4 data generation: output-of ids; "
                       "REFERENCE.md 5.3)", ids, "data generation --layer-ids (config ids written null)",
                       "output_of", extra={"data_generation_ids": gen},
                       notes=["0.3/0.4 write null ids into the config; under vLLM defaults that is one "
                              "layer off (REFERENCE.md 5.3)"])
    if any(b.index == 0 for b in bs) and not allow_embedding:
        raise TranslationError("B_0 (embedding) is an aux slot but embedding capture is not allowed")
    ids = [b.index for b in bs]
    return ToolIds("speculators", f"speculators>=0.5 (checked against {ver}; REFERENCE.md 2.1, 5.3)", ids,
                   f"speculators config.json: {TOP_KEY} (top level; training, resolve_target_layer_ids)",
                   "boundary", extra={"data_generation_ids": ids + [L],
                                      "data_generation_key": "scripts/launch_vllm.py --target-layer-ids "
                                      "(--include-last-layer appends L; speculators 0.9.0)"},
                   notes=["the data must store the aux slots ascending with B_L last; routing is purely "
                          "positional (REFERENCE.md 5.2)"])


def _to_specforge(bs: list[Boundary], L: int, *, architecture: str, version: Optional[str], verifier,
                  allow_embedding: bool) -> ToolIds:
    """SpecForge: exactly 3 output-of ids under the nested key."""
    names = [str(b) for b in bs]
    if len(bs) != 3:
        raise TranslationError(f"SpecForge requires exactly 3 ids (resolve_eagle_capture_layers, "
                               f"specforge/algorithms/model_providers.py:188-210); the contract has {len(bs)}")
    if any(b.index == 0 for b in bs):
        raise TranslationError("B_0 cannot be expressed in SpecForge's output-of ids (it would be -1)")
    ids = [b.index - 1 for b in bs]
    notes = ["SpecForge's offline hidden_state (the training target) is F, post-norm (REFERENCE.md 6)",
             "the HF backend concatenates in list order; keep the ids ascending"]
    try:
        rule = sglang_rule(architecture, None)
        got = rule.boundaries(L, ids)
        if got != bs:
            notes.append(f"with SpecForge's SGLang backend on sglang {rule.version} these ids capture "
                         f"{[str(b) for b in got]}, not {names} ({rule.model_file}.py rule)")
    except TranslationError as e:
        notes.append(f"SGLang backend: {e}")
    specforge_layer_ids(ids, L)  # SpecForge's own resolver accepts them (raises its words if not)
    notes.append("SpecForge 0.2.0's trainer pairs (h_t, x_t+1, F_t+1, l_t): TargetHead.preprocess shifts input_ids "
                 "and target but not loss_mask (sgl-project/SpecForge#885); state it in alignment (loss_mask: 0 "
                 "with loss_mask_reason)")
    return ToolIds("specforge", f"specforge=={version or '0.2.0'} (resolve_eagle_capture_layers, specforge/algorithms/"
                   "model_providers.py:188-211; REFERENCE.md 6)", ids,
                   f"draft config.json: {SGLANG_KEY}", "output_of", notes=notes)




def specforge_layer_ids(ids: Optional[Sequence[int]], num_layers: int) -> list[int]:
    """The ids SpecForge resolves for a draft config holding ``ids`` in its nested
    ``eagle_config`` (None: no key), asked of the installed SpecForge's own
    ``resolve_eagle_capture_layers`` (specforge 0.2.0 algorithms/model_providers.py:188-211: the run
    override, else the nested key, else ``[1, L//2-1, L-4]``; exactly three non-negative ints).
    Without SpecForge installed, that release's rule as read from the same lines.

    Raises:
        TranslationError: SpecForge refuses the ids (its ValueError's words).
    """
    cfg = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": list(ids)}} if ids is not None else {}
    try:
        from specforge.algorithms.model_providers import resolve_eagle_capture_layers
    except ImportError:
        got = list(ids) if ids is not None else [1, num_layers // 2 - 1, num_layers - 4]
        if len(got) != 3 or any(not isinstance(i, int) or i < 0 for i in got):
            raise TranslationError(f"specforge: exactly 3 non-negative ids required, got {got}") from None
        return got
    try:
        return resolve_eagle_capture_layers(SimpleNamespace(model=SimpleNamespace(aux_hidden_state_layer_ids=None)),
                                            cfg, SimpleNamespace(num_hidden_layers=num_layers))
    except ValueError as e:
        raise TranslationError(f"specforge (resolve_eagle_capture_layers): {e}") from None


_TO_TOOL = {"sglang": _to_sglang, "vllm": _to_vllm, "speculators": _to_speculators, "specforge": _to_specforge}


def tool_to_boundaries(tool: str, ids: Optional[Sequence[int]], num_layers: int, *,
                       architecture: str = "LlamaForCausalLM", version: Optional[str] = None,
                       allow_embedding: bool = False) -> list[Boundary]:
    """Inverse of :func:`boundaries_to_tool`: what ``tool`` captures for ``ids`` (None: the
    tool's default).

    Raises:
        TranslationError: the ids cannot be read unambiguously by the tool (see
            :meth:`SGLangRule.boundaries`), or an unknown tool.
    """
    _check_tool(tool)
    check_tool_version(tool, version)
    L = num_layers
    if tool == "sglang":
        return sglang_rule(architecture, version).boundaries(L, ids, allow_embedding=allow_embedding)
    if tool == "specforge":
        ids = specforge_layer_ids(ids, L)
    if ids is None:
        return [Boundary(i) for i in engine_default_aux_ids(L)]
    ids = [int(i) for i in ids]
    if tool == "specforge" or (tool == "speculators" and version and _vkey(version) < (0, 5)):
        if len(set(ids)) != len(ids) or min(ids) < 0:
            raise TranslationError(f"{tool}: ids {ids} must be unique and non-negative")
        if tool == "specforge" and len(ids) != 3:
            raise TranslationError(f"specforge: exactly 3 ids required, got {ids}")
        out = [Boundary(i + 1) for i in ids]
    else:
        if len(set(ids)) != len(ids) or min(ids) < 0 or max(ids) > L:
            raise TranslationError(f"{tool}: ids {ids} must be distinct and in [0, {L}]")
        out = [Boundary(i) for i in ids]
    if ids != sorted(ids):
        raise TranslationError(f"{tool}: ids {ids} are not ascending; the concat order would not follow "
                               "the list in every backend (REFERENCE.md 2.2)")
    if any(b.index > L for b in out):
        raise TranslationError(f"{tool}: ids {ids} reach beyond B_{L}")
    if any(b.index == 0 for b in out) and not allow_embedding:
        raise TranslationError(f"{tool}: ids {ids} capture B_0 (the embedding output) (FAULTS.md K2)")
    return out


# --- contract validation without an engine ------------------------------------------------------

#: SGLang model files whose capture also reaches B_L (they capture at the final norm; see the
#: module docstring); everywhere else an SGLang capture stops at B_{L-1}
_FINAL_CAPTURE_FILES = {"gpt_oss", "minimax_m3", "laguna", "nemotron_h"}

#: target architecture -> SGLang model file, for contracts that declare SGLang but not its file
#: (SGLang's ModelRegistry, 0.5.23; only used where asking SGLang itself is not wanted)
SGLANG_MODEL_FILES = {
    "LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
    "Qwen2MoeForCausalLM": "qwen2_moe", "Qwen3MoeForCausalLM": "qwen3_moe", "Glm4MoeForCausalLM": "glm4_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2", "DeepseekV3ForCausalLM": "deepseek_v2",
    "KimiK25ForConditionalGeneration": "deepseek_v2", "GptOssForCausalLM": "gpt_oss",
    "MiniMaxM2ForCausalLM": "minimax_m2",
}

_PLUS = ("output-of (id i captures B_{i+1})", lambda ids: [i + 1 for i in ids])
_RAW = ("boundary (id i captures B_i)", lambda ids: list(ids))


def _static_rules(location: str, model_file: Optional[str]) -> list[tuple[str, Callable[[list[int]], list[int]], int]]:
    """The id rules that can read ``draft.layer_ids`` without asking an engine: ``(name, ids ->
    boundary indices, deepest index it captures relative to L: 0 = B_L, -1 = B_{L-1})``. One rule
    when the reader is known (SGLang with a model file), two when the ids may be read either way
    (any one of them must then give the declared boundaries), none when the values are ignored."""
    if model_file is None:
        return [(_PLUS[0], _PLUS[1], 0), (_RAW[0], _RAW[1], 0)]
    if location == "top_level":
        return []  # SGLang ignores a top-level key: its defaults apply, whatever the values (K1)
    last = 0 if model_file in _FINAL_CAPTURE_FILES else -1
    if model_file in _PLUS_ONE_FILES:
        return [(f"sglang {model_file}.py (id i captures B_{{i+1}})", _PLUS[1], last)]
    if model_file == "deepseek_v2":  # the rule changed at 0.5.13 (REFERENCE.md 3.2): either release's reading
        return [("sglang deepseek_v2.py >= 0.5.13 (+1 only when the first id is 1)",
                 lambda ids: [i + 1 for i in ids] if ids and ids[0] == 1 else list(ids), -1),
                ("sglang deepseek_v2.py 0.5.5-0.5.12 (id i captures B_{i+1})", _PLUS[1], -1)]
    # gpt_oss.py and files without a recorded rule: either convention
    return [(_PLUS[0], _PLUS[1], last), (_RAW[0], _RAW[1], last)]


def layer_id_problems(num_layers: int, boundaries: Sequence[str], values: Optional[Sequence[int]],
                      location: str, *, sglang: bool = False, model_file: Optional[str] = None,
                      architecture: Optional[str] = None) -> list[tuple[tuple, str]]:
    """Why a contract's ``draft.layer_ids.values`` cannot give its ``capture.boundaries`` under
    the rule of the tool that reads them, found without an engine. Returns ``(key path under
    draft.layer_ids, message)`` pairs; empty when consistent.

    The reader: SGLang when the contract declares it (``sglang``: validated versions listed, or
    ``model_file`` given), with the rule of its model file (``model_file``, else looked up from
    ``architecture`` in :data:`SGLANG_MODEL_FILES`); otherwise either id convention may apply
    (output-of or boundary) and one of them must give the boundaries.

    Checked: negative ids (no tool reads one as a layer; -1 reaches the embedding under a +1
    rule); ids that read past the target's depth under the rule (B_{L+1}, or B_L in an SGLang
    model file whose capture stops before the final norm: FAULTS.md K3); ids whose reading is not
    the declared boundaries (the message gives the ids that are). The id count and ids beyond L
    are :func:`eagle3_conformance.contract.semantic_problems`' own checks.

    Args:
        num_layers: L.
        boundaries: ``capture.boundaries``, e.g. ``["B_2", "B_4", "B_5"]``.
        values: the ids as written (None: absent).
        location: ``"nested"``, ``"top_level"`` or ``"absent"``.
    """
    out: list[tuple[tuple, str]] = []
    if values is None or location == "absent":
        return out
    ids = [int(v) for v in values]
    L = num_layers
    for i, v in enumerate(ids):
        if v < 0:
            out.append((("values", i), f"layer id {v} is negative: no tool reads it as a layer, and under a +1 "
                                       "rule -1 reaches B_0, the embedding (FAULTS.md K2)"))
    try:
        want = [Boundary.parse(b).index for b in boundaries]
    except ValueError:
        return out
    if len(ids) != len(want) or any(v < 0 or v > L for v in ids):
        return out  # reported above or by semantic_problems
    if sglang or model_file:
        model_file = model_file or SGLANG_MODEL_FILES.get(architecture or "")
    else:
        model_file = None
    rules = _static_rules(location, model_file)
    if len(rules) == 1:
        name, rule, last = rules[0]
        got = rule(ids)
        past = [(i, v, g) for i, (v, g) in enumerate(zip(ids, got)) if g > L + last]
        for i, v, g in past:
            why = (f"B_{g} is beyond the target's L = {L}" if g > L else
                   f"{model_file}.py never captures B_{L}: its capture loop stops before the final norm (FAULTS.md K3)")
            out.append((("values", i), f"layer id {v} reads as B_{g} under {name}: {why}"))
        if not past and got != want:
            fix = next((cand for cand in ([b - 1 for b in want], list(want)) if min(cand) >= 0 and rule(cand) == want),
                       None)
            out.append((("values",), f"ids {ids} capture {[f'B_{g}' for g in got]} under {name}; capture.boundaries "
                                     f"says {[f'B_{b}' for b in want]}" + (f": write {fix}" if fix else "")
                        + " (FAULTS.md K2)"))
        return out
    if rules and not any(rule(ids) == want for _, rule, _ in rules):
        both = "; ".join(f"as {name}: {[f'B_{g}' for g in rule(ids)]}" for name, rule, _ in rules)
        out.append((("values",), f"ids {ids} cannot give capture.boundaries {[f'B_{b}' for b in want]} under any "
                                 f"reading ({both}) (FAULTS.md K2)"))
    return out
