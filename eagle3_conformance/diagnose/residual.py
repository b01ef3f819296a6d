"""Diagnoses of the residual checks (checks/residual.py): a layer's update captured without its
residual (slot + B_{k-1} = B_k)."""

from __future__ import annotations

from collections import Counter

from eagle3_conformance.contract import Contract
from eagle3_conformance.diagnose.base import (
    _IDENTITY_CHECKS,
    _VERIFIER_CHECKS,
    Diagnosis,
    _explained,
    _idx,
    _PathView,
    _slot_index,
)
from eagle3_conformance.diagnose.fixes import _Fixer


def _without_residual(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """``residual_missing`` failed: slots hold the layer's update, not the residual stream."""
    bad = v.failing("residual_missing")
    if not bad or "slot_identity" in used:
        return []
    labels = sorted({f.slot for f in bad if f.slot}, key=lambda s: _slot_index(s) if s != "verifier" else 10**6)
    declared = {f.slot: str(f.expected) for f in bad}
    used.update(_IDENTITY_CHECKS + ("residual_missing",) + (_VERIFIER_CHECKS if "verifier" in labels else ()))
    n = max(Counter(f.slot for f in bad).values())
    n_all = max((j.judged for j in v.aux()), default=n)
    ev = [f"{lab} + B_{(_idx(declared[lab]) or 1) - 1} is {declared[lab]} on the reference (the slot itself matches "
          "no boundary)" for lab in labels]
    if v.others_matched:
        ev.append(f"on {', '.join(v.others_matched)} the same reference matches the declared boundaries: the reference "
                  "is the right checkpoint")
    return [Diagnosis(
        "hidden-without-residual", "K4", f"{', '.join(labels)} hold{'s' if len(labels) == 1 else ''} the layer's update "
        "without the residual it is added to", tuple(ev),
        ("capture the residual stream entering the layer (hidden_states + residual after the fused add), not the "
         "layer's output before the add (vllm-project/vllm#14464; SGLang 0.5.23's Gemma 3 aux capture)",),
        (v.path,), tuple(labels), _explained(v, _IDENTITY_CHECKS + ("residual_missing",), labels),
        {v.path: f"{n}/{n_all} {v.unit}"})]
