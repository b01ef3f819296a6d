"""The result type every check returns, and the report document that holds them.

One shape end to end: a :class:`Finding` is made by a check, pickled as it is across Ray tasks,
written by :meth:`Finding.to_json` and read back by :meth:`Finding.from_json` (merge-reports, a
report file handed to the diagnosis), with no field dropped either way. A :class:`Report` is the
JSON document of a run (``contract``, ``diagnoses``, ``findings``, ``meta``), rendered by
:meth:`Report.to_json` for every report the package writes (check-data, check-offline, the
pytest plugin's ``--conformance-json``, merge-reports).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping, Optional, Protocol, Union

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
        fault: the fault-kinds.md kind this check exists for (e.g. "K2").
        gate: the contract key whose value decided a failure (e.g. ``gates.identity_noise_deg``),
            so a report or a refusal can say which setting changes the verdict; empty when the
            verdict rests on no tunable value (a wrong width, a boundary matching nothing).
        count: for an entry folding passing findings (``--json-passes counts``,
            :func:`eagle3_conformance.report.report_doc`): how many it stands for; None for one finding.
        profile: for the identity checks (``slot_identity``, ``verifier_identity``): the
            statistic the verdict rested on, ``{"cosine": [...], "tokens": n, "over": words}``:
            the mean per-token cosine of the slot with each reference boundary, ordered
            B_0..B_L, F (length L + 2; :func:`eagle3_conformance.checks.identity.similarity_profile`)
            over the ``tokens`` rows named by ``over`` ("resolvable tokens" the rank test used, or
            "all kept tokens" when none was resolvable); None for other checks (and in reports
            written before it was recorded). The HTML report's fingerprint heatmap draws it.
        extra: keys of a JSON finding this version does not know, kept as they were (a report
            written by another version); empty for findings made here.
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
    count: Optional[int] = None
    profile: Optional[Mapping[str, Any]] = None
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict[str, Any]:
        # field by field (dataclasses.asdict deep-copies every value first: 5x slower, and
        # _jsonable copies what it keeps anyway); the key order is the field order, as asdict's
        d = {"check": self.check, "status": self.status, "path": self.path, "slot": self.slot,
             "expected": _jsonable(self.expected), "observed": _jsonable(self.observed), "where": self.where,
             "message": self.message, "fault": self.fault}
        if self.gate:
            d["gate"] = self.gate
        if self.count is not None:
            d["count"] = self.count
        if self.profile is not None:
            d["profile"] = _jsonable(self.profile)
        d.update(self.extra)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Finding":
        """The finding of one JSON entry (:meth:`to_json`'s output, or a report file's):
        ``message`` and ``fault`` default to ``""``, ``gate`` to ``""``, other missing keys to
        None; unknown keys are kept in ``extra``. ``from_json(f.to_json()).to_json() ==
        f.to_json()``.
        """
        known = {k: d.get(k, "" if k in ("message", "fault", "gate") else None) for k in _FIELDS}
        if known["gate"] is None:
            known["gate"] = ""
        return cls(**known, extra={k: v for k, v in d.items() if k not in _FIELDS and k != "extra"})


_FIELDS = ("check", "status", "path", "slot", "expected", "observed", "where", "message", "fault", "gate", "count",
           "profile")


def as_finding(f: Any) -> Finding:
    """``f`` itself when it is a :class:`Finding`, else :meth:`Finding.from_json` of it."""
    return f if isinstance(f, Finding) else Finding.from_json(f)


FindingLike = Union[Finding, dict[str, Any]]
"""A :class:`Finding`, or its JSON form (:meth:`Finding.to_json`); the report renderers read both."""


class _Diagnosed(Protocol):
    """A diagnosis object (:class:`eagle3_conformance.diagnose.Diagnosis`), as a report holds it."""

    def to_json(self) -> dict[str, Any]: ...


DiagnosisLike = Union[_Diagnosed, Mapping[str, Any]]
"""A diagnosis object, or its JSON form (the ``diagnoses`` entries of a :class:`Report`)."""


@dataclass
class Report:
    """The JSON document of one run or one merge.

    Attributes:
        contract: the contract the findings were judged against (its path as given, or names).
        findings: every finding, in order (entries folding passes carry ``count``).
        meta: JSON-able metadata (what was read, how, the verdict line, ...).
        diagnoses: :class:`eagle3_conformance.diagnose.Diagnosis` objects or their dicts; None: the
            document has no ``diagnoses`` key (a merge without a contract to diagnose with).
    """

    contract: str
    findings: list[Finding]
    meta: dict[str, Any] = field(default_factory=dict)
    diagnoses: Optional[list[Any]] = None

    def to_json(self) -> dict[str, Any]:
        """``{"contract", ["diagnoses",] "findings", "meta"}``, the key order every report has."""
        doc: dict[str, Any] = {"contract": self.contract}
        if self.diagnoses is not None:
            doc["diagnoses"] = [d.to_json() if hasattr(d, "to_json") else dict(d) for d in self.diagnoses]
        doc["findings"] = [f.to_json() for f in self.findings]
        doc["meta"] = self.meta
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Report":
        """The report of a JSON document (its shape checked by the caller: ``contract`` and a
        ``findings`` list of objects)."""
        return cls(doc["contract"], [Finding.from_json(f) for f in doc["findings"]], dict(doc.get("meta", {})),
                   list(doc["diagnoses"]) if isinstance(doc.get("diagnoses"), list) else None)


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


STORED_PATH_PREFIX = "training"
"""Every tool that reads stored training data names its captures' path ``training`` or
``training-<reader>`` (``training-disk``, ``training-vllm``, ``training-legacy``,
``training-specforge``) and sets :attr:`eagle3_conformance.core.capture.Capture.stored`."""


def stored_path(path: str) -> bool:
    """Whether findings of path ``path`` judged stored training data (samples, not served captures).

    For what sees only findings (the diagnosis, a merged JSON report): a finding keeps its path's
    name, not its capture, so the name is read here, and only here; checks read
    :attr:`eagle3_conformance.core.capture.Capture.stored`.
    """
    return path.startswith(STORED_PATH_PREFIX)


def failed(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.status == "fail"]
