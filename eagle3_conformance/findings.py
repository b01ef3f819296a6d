"""The result type every check returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

Status = Literal["pass", "fail", "skip"]


@dataclass(frozen=True)
class Finding:
    """One check's verdict on one slot (or the whole capture) of one sample on one path.

    Attributes:
        check: check name, e.g. "slot_identity".
        status: "pass", "fail" or "skip" (skip says why in ``message``; uncalibrated norm bands
            are reported as skip with observed "uncalibrated", never as pass).
        path: "training", "sglang-extend", "sglang-decode", "contract" or "data".
        slot: slot label ("slot 0", "verifier", "feature") or None.
        expected: what the contract requires, in words or numbers.
        observed: what was measured.
        where: locator: sample index, file, batch/request.
        message: one sentence in words for the report.
        fault: the FAULTS.md kind this check exists for (e.g. "K2").
        gate: the contract key whose value decided a failure (e.g. ``gates.identity_noise_deg``),
            so a report or a refusal can say which setting changes the verdict; empty when the
            verdict rests on no tunable value (a wrong width, a boundary matching nothing).
    """

    check: str
    status: Status
    path: str
    slot: Optional[str]
    expected: Any
    observed: Any
    where: str
    message: str = ""
    fault: str = ""
    gate: str = ""

    def to_json(self) -> dict[str, Any]:
        # field by field (dataclasses.asdict deep-copies every value first: 5x slower, and
        # _jsonable copies what it keeps anyway); the key order is the field order, as asdict's
        d = {"check": self.check, "status": self.status, "path": self.path, "slot": self.slot,
             "expected": _jsonable(self.expected), "observed": _jsonable(self.observed), "where": self.where,
             "message": self.message, "fault": self.fault}
        if self.gate:
            d["gate"] = self.gate
        return d


def _jsonable(v: Any) -> Any:
    if isinstance(v, (str, int, bool)) or v is None:
        return v
    if isinstance(v, float):
        return round(v, 6)
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return str(v)


def failed(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.status == "fail"]
