"""What an acceptance comparison could not decide, in words (:func:`inconclusive`): the report's
INCONCLUSIVE verdict and exit 3 (:attr:`eagle3_conformance.core.exit_codes.ExitCode.INCONCLUSIVE`)."""

from __future__ import annotations

from typing import Any, Iterable, Optional


def _get(f: Any, key: str) -> Any:
    return f.get(key) if isinstance(f, dict) else getattr(f, key)


def inconclusive(findings: Iterable) -> Optional[str]:
    """Why the run's data could not decide, or None: the gated figures whose baseline comparison is
    INCONCLUSIVE (:func:`eagle3_conformance.checks.facts.check_accept_regression`, a skip whose observed
    ``decision`` is ``"INCONCLUSIVE"``), in words: the change, the tolerance, the smallest drop the run
    could detect and the prompts that would decide it. The verb then exits
    :attr:`eagle3_conformance.core.exit_codes.ExitCode.INCONCLUSIVE` (3) unless something failed."""
    out = []
    for f in findings:
        ob = _get(f, "observed")
        if _get(f, "check") == "accept_regression" and _get(f, "status") == "skip" and isinstance(ob, dict) \
                and ob.get("decision") == "INCONCLUSIVE" and ob.get("gated", True):
            lo, hi = ob.get("change") or [float("nan")] * 2
            need = ob.get("units_needed")
            out.append(f"{_get(f, 'slot')} change [{lo:+.3f}, {hi:+.3f}] straddles the tolerance "
                       f"({_get(f, 'expected')}); the smallest drop this run could detect is "
                       f"{ob.get('detectable_drop', float('nan')):.3f}; "
                       + (f"about {need} prompts would decide it" if need else "no number of prompts decides it"))
    return "; ".join(out) or None
