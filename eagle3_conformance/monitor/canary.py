"""The canary: ``accept --baseline`` run by the monitor, on an alarm or every ``--canary-every`` seconds.

The held-out prompt set (``eagle3_conformance/server_accept/``), the baseline's prompts and token
budget, greedy, per-request counters: the same run and the same rule as ``eagle3-conformance accept
--baseline`` (:func:`eagle3_conformance.server_accept.session.measure`; nothing is re-implemented
here). Its verdict tells a real drop from a traffic-mix shift: the traffic's acceptance moved, but
on the fixed prompts the server still meets its baseline (``MET``), or it does not (``DROPPED``).
It is the only traffic the monitor sends; the windows it overlaps are excluded from the drift test.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

from eagle3_conformance.core.errors import InputError

MET, DROPPED, INCONCLUSIVE, ERROR = "ACCEPTANCE MET", "DROPPED", "INCONCLUSIVE", "ERROR"


@dataclass
class CanaryResult:
    """One canary run: ``verdict`` (``ACCEPTANCE MET``, ``DROPPED``, ``INCONCLUSIVE``: :func:`verdict`;
    ``ERROR``), when it started and how long it took, the figures' comparison rows (``accept``'s), the
    failing findings' messages, the error in words when it could not run, and each figure's decision
    (:meth:`eagle3_conformance.acceptance.decision.Decision.to_json`, with the prompts that would decide
    an INCONCLUSIVE one) over ``prompts`` prompts of a held-out set of ``prompt_set``."""

    verdict: str
    started: float
    seconds: float
    rows: Optional[list] = None
    failed: Optional[list] = None
    error: str = ""
    accept_length: Optional[float] = None
    decisions: Optional[list] = None
    prompts: int = 0
    prompt_set: int = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def line(self) -> str:
        if self.verdict == ERROR:
            return f"canary could not run: {self.error}"
        rows = "; ".join(f"{r['figure']} {r['baseline']:.3f} -> {r['now']:.3f} [{r['difference'][0]:+.3f}, "
                         f"{r['difference'][1]:+.3f}]" for r in self.rows or [])
        return f"canary (held-out prompts vs the baseline, {self.seconds:.0f} s): {self.verdict}: {rows}"


def verdict(rows: list, failed: list, prompts: int) -> tuple[str, list]:
    """The canary's verdict from ``accept``'s comparison rows over ``prompts`` prompts and its failing
    findings' messages: each figure's decision (``accept``'s own, :func:`_decision`), combined as
    ``accept`` combines them
    (:func:`~eagle3_conformance.acceptance.decision.overall`: DROPPED when a figure dropped or a check
    failed, INCONCLUSIVE when the accept length is undecided, else MET; a later position's undecided
    tolerance, 5% of a small share, is reported, not waited for). Returns ``(verdict, decisions as JSON)``."""
    from eagle3_conformance.acceptance.decision import DROPPED as D_DROPPED
    from eagle3_conformance.acceptance.decision import INCONCLUSIVE as D_INCONCLUSIVE
    from eagle3_conformance.acceptance.decision import decide, overall

    ds = [_decision(r, prompts, decide) for r in rows]
    v = overall(ds, [r["figure"] == "accept length" for r in rows]) if ds else D_INCONCLUSIVE
    out = DROPPED if failed or v == D_DROPPED else INCONCLUSIVE if v == D_INCONCLUSIVE else MET
    return out, [{"figure": r["figure"], **d.to_json()} for r, d in zip(rows, ds)]


def _decision(row: dict, prompts: int, decide: Any) -> Any:
    """``accept``'s own decision on the row (``row["decision"]``, :func:`~eagle3_conformance.server_accept.figures`
    computes it from the per-prompt counters, with the baseline's spread): the canary says what ``accept`` says,
    and states the same detectable drop. A row without one (an older baseline's comparison) is decided here
    from its interval, as ``accept`` decided before it carried decisions."""
    from eagle3_conformance.acceptance.decision import Decision

    d = row.get("decision")
    if d:
        return Decision(d["verdict"], (float(d["change"][0]), float(d["change"][1])), float(d["estimate"]),
                        float(d["tolerance"]), float(d["detectable_drop"]), int(d["units"]), d.get("units_needed"))
    return decide(row["difference"], row["now"] - row["baseline"], row["tolerance"], prompts)


def undecided(res: dict) -> tuple[str, str]:
    """An INCONCLUSIVE canary (``CanaryResult.to_json()``) in words: what it could not tell, and what
    would decide it (the prompts the observed interval says would, and how to get them)."""
    d = next((x for x in res.get("decisions") or [] if x["figure"] == "accept length"), None)
    if d is None:
        return "the canary is INCONCLUSIVE", "run it again"
    lo, hi = d["change"]
    what = (f"the canary is INCONCLUSIVE: accept length change {d['estimate']:+.3f}, paired 95% interval "
            f"[{lo:+.3f}, {hi:+.3f}] over {d['units']} prompts straddles -{d['tolerance']:.3f} (the tolerance): "
            "it tells neither a drop from noise nor a traffic-mix shift from a fault")
    n, held = d.get("units_needed"), res.get("prompt_set") or 0
    if n is None:
        how = "no number of prompts decides a change equal to the tolerance"
    elif held and n <= held:
        how = (f"about {n} prompts would decide it: record the baseline again with accept --record --prompts {n} "
               f"(the held-out set has {held}; the canary runs the baseline's prompts)")
    else:
        how = f"about {n} prompts would decide it, more than the held-out set's {held or '?'}"
    return what, how


def run_canary(server: str, baseline: str, contract, *, tolerance: float, concurrency: int,
               request_timeout: float = 300.0, run_timeout: float = 1800.0) -> CanaryResult:
    """Run the canary against ``server`` with the baseline file ``baseline`` for ``contract``.
    Never raises on the server's behaviour: a run that fails is ``ERROR`` with the reason."""
    from eagle3_conformance.server_accept.session import Options, measure

    t0 = time.time()
    opts = Options(server=server, baseline=baseline, concurrency=concurrency, tolerance=tolerance,
                   request_timeout=request_timeout, run_timeout=run_timeout)
    try:
        o = measure(opts, contract)
    except InputError as e:
        return CanaryResult(ERROR, t0, time.time() - t0, error=str(e))
    from eagle3_conformance.server_accept.prompts import load_prompts

    failed = [f.message for f in o.findings if f.status == "fail"]
    v, decisions = verdict(o.rows or [], failed, len(o.res.results))
    return CanaryResult(v, t0, time.time() - t0, rows=o.rows, failed=failed,
                        accept_length=o.fig["accept_length"]["value"], decisions=decisions,
                        prompts=len(o.res.results), prompt_set=len(load_prompts()))
