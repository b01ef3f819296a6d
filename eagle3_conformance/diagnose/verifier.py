"""Diagnoses of the verifier checks (checks/verifier.py): the verifier slot in the other norm state,
or holding another boundary."""

from __future__ import annotations

from eagle3_conformance.contract import Contract
from eagle3_conformance.diagnose.base import _VERIFIER_CHECKS, Diagnosis, _explained, _PathView
from eagle3_conformance.diagnose.fixes import _Fixer


def _verifier_state(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    if "verifier_identity" in used:
        return []
    ver = v.verifier()
    norm = v.failing("verifier_norm_state")
    L = c.L
    ev: list[str] = []
    got = None
    if ver is not None and ver.wrong and {ver.declared, ver.observed} == {f"B_{L}", "F"}:
        got = ver.observed
        ev.append(f"the verifier slot is {ver.observed}; contract says {ver.declared}")
    if norm:
        f = norm[0]
        ev.append(f"verifier slot state: {f.observed}; contract says {f.expected}")
        if got is None:
            got = "F" if str(f.observed).startswith("post") else f"B_{L}"
    if got is None:
        return []
    used.update(_VERIFIER_CHECKS)
    if got == "F":
        title = f"the verifier slot is F (after the final norm) where the contract declares B_{L} (before it)"
        fix = (f"store B_{L}, the last layer's output before the final norm: speculators applies verifier_norm "
               "itself in training (REFERENCE.md 5.3), so a stored F is normalized twice",
               "or, if F is intended (SpecForge's offline target is F), set verifier_last: {tensor: F, norm: post}")
    else:
        title = f"the verifier slot is B_{L} (before the final norm) where the contract declares F (after it)"
        fix = ("apply the final norm before storing the verifier slot (capture at the final norm's output)",
               f"or, if B_{L} is intended (speculators), set verifier_last: {{tensor: B_{L}, norm: pre}}")
    n = max(len(norm), ver.fails if ver is not None else 0)
    judged = max(len(v.by_check.get("verifier_norm_state", [])), ver.judged if ver is not None else 0)
    return [Diagnosis("verifier-norm-state", "K4", title, tuple(ev), fix, (v.path,), ("verifier",),
                      _explained(v, _VERIFIER_CHECKS, ["verifier"]), {v.path: f"{n}/{judged} {v.unit}"})]


def _verifier_other(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """The verifier slot holds another boundary than B_L / F (the embedding B_0, a mid layer) or none:
    every failing slot kind gets a diagnosis (issue 23 item 6)."""
    ver = v.verifier()
    if "verifier_identity" in used or ver is None or not ver.wrong:
        return []
    used.update(_VERIFIER_CHECKS)
    what = {"none": "no boundary of the reference", "B_0": "B_0, the embedding output"}.get(
        ver.observed, f"{ver.observed}, a mid-depth boundary")
    return [Diagnosis(
        "verifier-slot-off", "K3", f"the verifier slot holds {what} where the contract declares {ver.declared}",
        (f"verifier_identity: {ver.observed} on {ver.fails} of {ver.judged} {v.unit}; contract says {ver.declared}",),
        (f"store {ver.declared} as the last plane: the data-generation list is the aux ids then L = {c.L} (speculators' "
         "launcher appends L itself with --include-last-layer, its default); an id of 0 there stores the embedding",),
        (v.path,), ("verifier",), _explained(v, _VERIFIER_CHECKS, ["verifier"]),
        {v.path: f"{ver.fails}/{ver.judged} {v.unit}"})]
