"""What a paired acceptance comparison can decide: MET, DROPPED or INCONCLUSIVE, the smallest drop the
run could have detected, and how many prompts (or windows) would decide it.

One pure function, :func:`decide`, on the figures every acceptance comparison already has: the paired
interval of ``now - baseline`` of one figure (an accept length, or one draft position's acceptance) and
the tolerance, the largest drop still accepted (absolute, in the figure's units). ``accept --baseline``
applies it per figure (:func:`eagle3_conformance.checks.facts.check_accept_regression`); a production
monitor (issue 44) applies it per window of counters. :func:`decide_paired` computes the interval from
per-unit counters first (a unit is a prompt, or a window). Pure: no torch, no engine, no I/O.

The rule (docs/accept.md, "What a run can decide"):

- **MET**: the whole interval lies at or above ``-tolerance`` (``lo >= -tolerance``): the drop, if any,
  is within the tolerance beyond the units' noise.
- **DROPPED**: the whole interval lies below ``-tolerance`` (``hi < -tolerance``): the figure dropped by
  more than the tolerance beyond the noise.
- **INCONCLUSIVE**: otherwise (the interval straddles ``-tolerance``): the data cannot tell a drop of
  the tolerance from noise; neither a pass nor a failure
  (:attr:`eagle3_conformance.core.exit_codes.ExitCode.INCONCLUSIVE`).

**The smallest detectable drop** ``tolerance + w``: a true drop ``D`` moves the interval to about
``[-D - w_lo, -D + w]``, which lies below ``-tolerance`` only when ``D > tolerance + w``, with ``w`` the
interval's upper half-width. The run's own upper half-width is ``hi - estimate``; a run identical to
its baseline (a deterministic engine, CPU greedy) measures a zero-width change and says nothing about
the spread a real change would have, so ``w`` is the larger of that and ``spread``: the upper
half-width of the baseline figure's own interval over the same units (a drop that scales each
prompt's acceptance spreads the paired differences about as much as the prompts themselves vary;
measured on SmolLM2's seed incident, docs/accept.md: paired half-width 0.105, baseline's 0.098).

**Units needed**: the interval's half-width shrinks as ``1/sqrt(n)``; the estimate's distance to
``-tolerance`` is ``m = estimate + tolerance``, so the interval clears it on the side the estimate lies
once ``n' > n (w_side / |m|)^2`` (``w_side`` the half-width facing ``-tolerance``). ``None`` when decided,
or when the estimate lies on ``-tolerance`` (no number of units decides a change equal to the
tolerance).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal, Optional, Sequence

from eagle3_conformance.acceptance.stats import bootstrap_accept_length, bootstrap_difference

Verdict = Literal["MET", "DROPPED", "INCONCLUSIVE"]
MET: Verdict = "MET"
DROPPED: Verdict = "DROPPED"
INCONCLUSIVE: Verdict = "INCONCLUSIVE"


@dataclass(frozen=True)
class Decision:
    """One figure's decision (:func:`decide`).

    Attributes:
        verdict: ``"MET"``, ``"DROPPED"`` or ``"INCONCLUSIVE"``.
        change: ``(lo, hi)``, the paired interval of ``now - baseline`` (figure units: tokens per verify
            step for an accept length, a share 0..1 for a position).
        estimate: the point change ``now - baseline``.
        tolerance: the largest drop accepted (> = 0, figure units).
        detectable_drop: the smallest true drop this run would have called DROPPED (>= ``tolerance``).
        units: the prompts (or windows) the interval was computed over.
        units_needed: the units the observed half-width says would decide it (INCONCLUSIVE only; None
            when decided or when the estimate lies on ``-tolerance``).
    """

    verdict: Verdict
    change: tuple[float, float]
    estimate: float
    tolerance: float
    detectable_drop: float
    units: int
    units_needed: Optional[int]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["change"] = list(self.change)
        return d


def decide(change: Sequence[float], estimate: float, tolerance: float, units: int,
           spread: float = 0.0) -> Decision:
    """The decision on one figure (the rule is the module docstring's).

    Args:
        change: ``(lo, hi)``, the paired interval of ``now - baseline`` (e.g. 95% bootstrap over units).
        estimate: the point change ``now - baseline`` (``lo <= estimate <= hi`` for a percentile
            interval of a well-behaved statistic; clamped into it otherwise).
        tolerance: the largest drop accepted, absolute (``fraction x baseline figure``), >= 0.
        units: how many prompts / windows the interval resamples (>= 1).
        spread: the upper half-width of the baseline figure's own interval over the same units (>= 0),
            the stand-in for a change's spread where the run measured none (module docstring).

    Raises:
        ValueError: ``lo > hi``, a negative ``tolerance`` or ``spread``, ``units < 1``, or a NaN.
    """
    lo, hi = float(change[0]), float(change[1])
    vals = (lo, hi, estimate, tolerance, spread)
    if any(math.isnan(float(v)) for v in vals):
        raise ValueError(f"decide: NaN in change {change}, estimate {estimate}, tolerance {tolerance}, "
                         f"spread {spread}")
    if lo > hi or tolerance < 0 or spread < 0 or units < 1:
        raise ValueError(f"decide: interval [{lo}, {hi}], tolerance {tolerance}, spread {spread}, units {units}")
    est = min(max(float(estimate), lo), hi)
    w_hi = max(hi - est, spread)
    detectable = tolerance + w_hi
    if lo >= -tolerance:
        return Decision(MET, (lo, hi), est, tolerance, detectable, units, None)
    if hi < -tolerance:
        return Decision(DROPPED, (lo, hi), est, tolerance, detectable, units, None)
    margin = est + tolerance
    w_side = est - lo if margin > 0 else hi - est
    needed = None if margin == 0 or w_side <= 0 else max(units + 1, math.ceil(units * (w_side / margin) ** 2))
    return Decision(INCONCLUSIVE, (lo, hi), est, tolerance, detectable, units, needed)


def _ratio(pairs: Sequence[tuple[int, int]]) -> float:
    steps = sum(s for _, s in pairs)
    return sum(t for t, _ in pairs) / steps if steps else float("nan")


def decide_paired(now: Sequence[tuple[int, int]], base: Sequence[tuple[int, int]], tolerance_fraction: float, *,
                  resamples: int = 2000, level: float = 0.95, seed: int = 0) -> Decision:
    """:func:`decide` from per-unit counters: ``now[i]`` and ``base[i]`` are unit ``i``'s ``(numerator,
    verify steps)`` in the two runs (the accept length's ``(committed tokens, steps)``, or position
    ``j``'s ``(steps that accepted position j, steps)``), the same units in the same order. The figure is
    pooled (total numerator / total steps); the change's interval is the paired percentile bootstrap
    (:func:`eagle3_conformance.acceptance.stats.bootstrap_difference`), the spread the baseline figure's
    own bootstrap upper half-width; the tolerance is ``tolerance_fraction x`` the baseline figure.

    Raises:
        TooFewPrompts: fewer than 5 units with a verify step in both runs.
        ValueError: the runs have different lengths, or ``tolerance_fraction`` is outside ``[0, 1)``.
    """
    if not 0 <= tolerance_fraction < 1:
        raise ValueError(f"tolerance fraction {tolerance_fraction}: give 0 <= t < 1")
    iv = bootstrap_difference(now, base, resamples=resamples, level=level, seed=seed)
    b = _ratio(base)
    biv = bootstrap_accept_length(base, resamples=resamples, level=level, seed=seed)
    return decide((iv.lo, iv.hi), _ratio(now) - b, tolerance_fraction * b, iv.prompts, max(biv.hi - b, 0.0))


def overall(decisions: Sequence[Decision], gated: Sequence[bool]) -> Verdict:
    """The run's verdict from its figures' decisions: DROPPED when any figure dropped; else INCONCLUSIVE
    when a ``gated`` figure is inconclusive; else MET. (``accept`` gates MET on the accept length; a
    later draft position's tolerance, 5% of a small share, lies below what a CI-sized prompt set
    resolves, so an undecided position is reported, not waited for; a dropped one still fails.)

    Raises:
        ValueError: no decision, or ``gated`` of another length.
    """
    if not decisions or len(decisions) != len(gated):
        raise ValueError(f"overall: {len(decisions)} decisions, {len(gated)} gated flags")
    if any(d.verdict == DROPPED for d in decisions):
        return DROPPED
    if any(d.verdict == INCONCLUSIVE for d, g in zip(decisions, gated) if g):
        return INCONCLUSIVE
    return MET


__all__ = ["DROPPED", "Decision", "INCONCLUSIVE", "MET", "Verdict", "decide", "decide_paired", "overall"]
