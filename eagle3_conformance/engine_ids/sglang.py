"""SGLang's EAGLE-3 id rule: draft-config ids <-> the boundaries ``B_k`` it captures.

The rule is *asked of the installed SGLang's own code*. The target model class is found
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
anything else is refused (``upgrade-check`` runs other releases' own code instead:
:mod:`eagle3_conformance.released`).
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass, field
from functools import lru_cache
from types import MethodType, SimpleNamespace
from typing import Callable, Optional, Sequence

from eagle3_conformance.core.notation import Boundary
from eagle3_conformance.engine_ids.base import (
    SGLANG_KEY,
    ToolIds,
    TranslationError,
    engine_default_aux_ids,
    version_key,
)

# Wrappers whose setter delegates to an inner language model (attribute, inner class name).
# kimi_k25.py:691-694 builds `self.language_model = DeepseekV3ForCausalLM(config.text_config)`,
# kimi_k25.py:928-939 forwards set_eagle3_layers_to_capture to it.
_DELEGATES = {"KimiK25ForConditionalGeneration": ("language_model", "DeepseekV3ForCausalLM")}

# Model files whose explicit ids get +1 in every release (REFERENCE.md section 3.2 table, 2.1).
PLUS_ONE_FILES = {
    "llama", "qwen2", "qwen3", "qwen2_5_vl", "qwen3_vl", "glm4_moe", "glm5_next", "bailing_moe",
    "longcat_flash", "minimax_m2", "gemma3_causal", "gemma3_mm", "gemma4_causal", "gemma4_mm",
    "qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5", "minimax_m3",
}

_FINAL_CAPTURE_RE = re.compile(r"(end_layer|len\(self\.layers\))\s+in\s+self\.layers_to_capture")


def installed_sglang_version() -> Optional[str]:
    """The installed SGLang version (from package metadata, no import), or None."""
    from eagle3_conformance.environment.installed import installed_version

    return installed_version("sglang")


@lru_cache(maxsize=None)
def registry_class(architecture: str):
    """The SGLang model class registered for ``architecture`` (None when unknown)."""
    from eagle3_conformance.environment import torch_env

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


def setter_stub(num_layers: int) -> SimpleNamespace:
    """A stand-in for an SGLang target model instance with only what the id setters read
    (``pp_group.is_last_rank``, ``config.num_hidden_layers``, ``model.layers_to_capture``)."""
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
                                       "rule; refusing (REFERENCE.md 2.2, fault-kinds.md K2)")
            if not allow_embedding:
                raise TranslationError(f"{where}: {shown}: captures B_0 (the embedding output); pass "
                                       "allow_embedding if that is intended (fault-kinds.md K2)")
        return [Boundary(i) for i in ltc]

    def defaults(self, num_layers: int) -> list[Boundary]:
        """Boundaries captured when the draft config gives no ids."""
        return self.boundaries(num_layers, None)


def _installed_rule(architecture: str, version: str) -> SGLangRule:
    cls = registry_class(architecture)
    if cls is None:
        raise TranslationError(f"sglang {version} has no model class registered for architecture "
                               f"{architecture!r} (sglang.srt.models.registry.ModelRegistry)")
    if not hasattr(cls, "set_eagle3_layers_to_capture"):
        raise TranslationError(f"sglang {version}: {cls.__module__}.{cls.__name__} has no "
                               "set_eagle3_layers_to_capture (no EAGLE-3 support)")
    inner_cls = None
    if cls.__name__ in _DELEGATES:
        attr, inner_name = _DELEGATES[cls.__name__]
        inner_cls = registry_class(inner_name)
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
        outer = setter_stub(num_layers)
        rec = outer
        if inner_cls is not None:
            inner = setter_stub(num_layers)
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
    vk = version_key(version)
    file = installed.model_file
    if vk > _NEWEST_KNOWN:
        raise TranslationError(f"sglang {version} is newer than {'.'.join(map(str, _NEWEST_KNOWN))}, the newest "
                               f"release whose id rules are recorded (REFERENCE.md 3.2), and it is not installed "
                               f"(installed: {installed.version}): install it so that its own setter can be asked",
                               not_installed=True)

    default = engine_default_aux_ids

    if file in PLUS_ONE_FILES:
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
                               "installed version", not_installed=True)
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
        raise TranslationError("sglang is not installed: its id rule cannot be asked of its code (pip install "
                               "'eagle3-conformance[sglang]')", not_installed=True)
    rule = _installed_rule(architecture, inst)
    if version is None or version_key(version) == version_key(inst):
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


def to_tool_ids(bs: list[Boundary], L: int, *, architecture: str, version: Optional[str], verifier,
                allow_embedding: bool) -> ToolIds:
    """SGLang: the ids its per-model-file setter turns into these boundaries (nested key)."""
    rule = sglang_rule(architecture, version)
    ids, alts = sglang_ids_for(rule, L, bs, allow_embedding=allow_embedding)
    notes = [f"SGLang reads only the draft config's nested key (spec_aux_hidden_state.py:185-196); a "
             "top-level key is ignored and the defaults "
             f"{[str(b) for b in rule.defaults(L)]} are captured silently (fault-kinds.md K1)"]
    others = [a for a in alts if a != ids]
    if others:
        notes.append(f"also captures the same boundaries in this release: {others}")
    if rule.model_file == "deepseek_v2":
        notes.append("deepseek_v2.py changed its rule at 0.5.13 (+1 always before, first-id rule after); "
                     "run `eagle3-conformance translate --engine-version` for each release you serve")
    return ToolIds("sglang", f"sglang=={rule.version} ({rule.source})", ids,
                   f"draft config.json: {SGLANG_KEY} (and eagle_config.use_aux_hidden_state: true)",
                   f"sglang {rule.model_file}.py setter", notes=notes)


def to_boundaries(ids: Optional[Sequence[int]], L: int, *, architecture: str, version: Optional[str],
                  allow_embedding: bool) -> list[Boundary]:
    """What SGLang ``version`` (None: installed) captures for nested ``ids`` (None: its defaults);
    see :meth:`SGLangRule.boundaries` for what is refused."""
    return sglang_rule(architecture, version).boundaries(L, ids, allow_embedding=allow_embedding)
