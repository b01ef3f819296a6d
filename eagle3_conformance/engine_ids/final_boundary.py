"""What an id naming the final boundary B_L captures, per engine and target family (issue 37, R53, R55).

B_L is the last decoder layer's output before the final norm. Whether an engine captures it depends
on where its capture loop records:

* SGLang: asked of the installed release's own code (:func:`eagle3_conformance.engine_ids.sglang.sglang_rule`:
  the target class's ``set_eagle3_layers_to_capture`` run on a stub, and whether its capture loop reaches
  entry L). In 0.5.23 ``llama.py`` (and the files sharing its loop) records entry i *entering* layer i,
  so entry L has no layer and is dropped silently; ``deepseek_v2.py`` raises (its packer's count check);
  ``gpt_oss.py`` captures at the final norm when ``max(ids) == L`` (sgl-project/sglang#32334, after
  R53: gpt-oss-120b-Eagle3-v3's [24, 30, 36] read as [25, 31, 37], the last never captured).
* vLLM (not installed here; REFERENCE.md 2.1 and the threads): id i = B_i; ``SupportsEagle3`` mixin
  models append B_L after the last layer (``llama.py:406-457``), so id L = B_L, and its
  ``extract_hidden_states`` default is [2, L/2, L-3, L]; DeepSeek / Kimi files capture a layer's
  *input* inside the loop, so id L captures nothing and the draft gets one slot fewer (R55,
  vllm-project/vllm#46788, #46973).
* speculators 0.9.0 data generation: the launcher appends L, stored as the verifier slot (B_L).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

_VLLM_INPUT_CAPTURE = ("Deepseek", "Kimi")


@dataclass(frozen=True)
class AtFinal:
    """One engine's reading of the id that names B_L in its convention.

    Attributes:
        engine: ``"sglang 0.5.23 (llama.py)"``, ``"vllm"``, ``"speculators 0.9.0 datagen"``.
        id: the id a user writes for B_L in that engine's convention.
        captures: ``"B_L"`` (e.g. ``"B_8"``), ``"nothing (dropped silently)"``, ``"nothing (refused: ...)"``,
            or another boundary.
        drops: True when the engine does not hand the draft B_L for that id.
        source: where the rule comes from (the code asked, or the thread).
    """

    engine: str
    id: int
    captures: str
    drops: bool
    source: str

    def line(self) -> str:
        return f"{self.engine}: id {self.id} -> {self.captures} ({self.source})"


def _sglang(L: int, architecture: str, version: Optional[str]) -> list[AtFinal]:
    from eagle3_conformance.engine_ids.base import TranslationError
    from eagle3_conformance.engine_ids.sglang import sglang_rule

    try:
        rule = sglang_rule(architecture, version)
    except TranslationError as e:
        return [AtFinal(f"sglang{' ' + version if version else ''}", L - 1, f"not asked: {e}", False, "")]
    except Exception as e:  # SGLang not importable here
        return [AtFinal("sglang", L - 1, f"not asked ({type(e).__name__})", False, "")]
    name = f"sglang {rule.version} ({rule.model_file}.py)"
    out = []
    for i in sorted({L - 1, L}):  # the output-of id (+1 rule) and the boundary id (gpt_oss at L)
        try:
            ltc = rule.layers_to_capture(L, [i])
        except Exception as e:  # the release's own setter raises on it
            out.append(AtFinal(name, i, f"nothing (refused: {type(e).__name__}: {e})", True, rule.source))
            continue
        hi = L if rule.captures_final else L - 1
        got = [f"B_{v}" for v in ltc if 0 <= v <= hi]
        if not got:
            how = "the setter raises (AuxHiddenStatePacker count check)" if rule.model_file == "deepseek_v2" else \
                "dropped silently"
            out.append(AtFinal(name, i, f"nothing ({how}: layers_to_capture {ltc}, the capture loop reaches 0..{hi})",
                               True, rule.source))
        else:
            other = got != [f"B_{L}"]
            out.append(AtFinal(name, i, ", ".join(got) + (f" (not B_{L}: another layer)" if other else ""), other,
                               rule.source))
    return out


def at_final_boundary(L: int, architecture: str, *, sglang_version: Optional[str] = None) -> list[AtFinal]:
    """Per engine, what the id naming ``B_L`` captures for a target of ``L`` layers and ``architecture``.

    SGLang is asked of its installed code (or of the known rule of ``sglang_version``); vLLM's and
    speculators' entries state their rule and its source (not installed here). Never raises."""
    out = _sglang(L, architecture, sglang_version)
    if any(architecture.startswith(p) for p in _VLLM_INPUT_CAPTURE):
        out.append(AtFinal("vllm", L, "nothing (the model file captures a layer's input inside the loop: no layer "
                           f"{L}; the draft gets one slot fewer)", True, "R55, vllm-project/vllm#46788, #46973; "
                           "vLLM not installed here"))
    else:
        out.append(AtFinal("vllm", L, f"B_{L} (SupportsEagle3 appends it after the last layer; extract_hidden_states "
                           f"default [2, L/2, L-3, L])", False, "REFERENCE.md 2.1, llama.py:406-457; vLLM not "
                           "installed here"))
    out.append(AtFinal("speculators 0.9.0 datagen", L, f"B_{L}, stored last as the verifier slot", False,
                       "launch_vllm.py appends L (--include-last-layer)"))
    return out


def final_boundary_notes(c) -> list[str]:
    """For a contract whose aux slots include ``B_L``: one line per engine saying what the id naming it
    captures; empty when no aux slot is B_L."""
    L = c.L
    if not any((not b.final) and b.index == L for b in c.aux):
        return []
    ver = c.engines.sglang_validated[-1] if c.engines.sglang_validated else None
    return [f"aux slot B_{L} (id = L): " + a.line() for a in at_final_boundary(L, c.target.architecture,
                                                                               sglang_version=ver)]


def final_boundary_problems(c) -> list[tuple[tuple, str]]:
    """A contract that names SGLang (``engines.sglang_validated`` or ``engines.sglang_model_file``) and
    declares B_L as an aux slot where that SGLang rule drops it: ``(key path, message)``."""
    L = c.L
    if not any((not b.final) and b.index == L for b in c.aux):
        return []
    if not (c.engines.sglang_validated or c.engines.sglang_model_file):
        return []
    ver = c.engines.sglang_validated[-1] if c.engines.sglang_validated else None
    rows = [a for a in _sglang(L, c.target.architecture, ver) if a.source]
    if rows and all(a.drops for a in rows):
        return [(("capture", "boundaries"), f"B_{L} is an aux slot, but " + "; ".join(a.line() for a in rows)
                 + f": SGLang never hands the draft B_{L} (R53, K3); drop it from the aux slots (speculators stores "
                 "it as the verifier slot) or serve with a model file that captures at the final norm (gpt_oss.py)")]
    return []
