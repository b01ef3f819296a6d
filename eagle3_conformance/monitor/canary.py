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
    """One canary run: ``verdict`` (``ACCEPTANCE MET``, ``DROPPED``, ``INCONCLUSIVE``: issue 41's decision,
    :func:`eagle3_conformance.acceptance.decision.decide`, on each figure's paired interval; ``ERROR``), when it started and
    how long it took, the figures' comparison rows (``accept``'s), the failing findings' messages,
    and the error in words when it could not run."""

    verdict: str
    started: float
    seconds: float
    rows: Optional[list] = None
    failed: Optional[list] = None
    error: str = ""
    accept_length: Optional[float] = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def line(self) -> str:
        if self.verdict == ERROR:
            return f"canary could not run: {self.error}"
        rows = "; ".join(f"{r['figure']} {r['baseline']:.3f} -> {r['now']:.3f} [{r['difference'][0]:+.3f}, "
                         f"{r['difference'][1]:+.3f}]" for r in self.rows or [])
        return f"canary (held-out prompts vs the baseline, {self.seconds:.0f} s): {self.verdict}: {rows}"


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
    from eagle3_conformance.acceptance.decision import decide

    failed = [f.message for f in o.findings if f.status == "fail"]
    n = len(o.res.results)
    verdicts = [decide(r["difference"], r["now"] - r["baseline"], r["tolerance"], n).verdict for r in o.rows or []]
    verdict = DROPPED if failed or "DROPPED" in verdicts else INCONCLUSIVE if "INCONCLUSIVE" in verdicts else MET
    return CanaryResult(verdict, t0, time.time() - t0, rows=o.rows, failed=failed,
                        accept_length=o.fig["accept_length"]["value"])
