"""What every diagnosis rule shares: the catalogue of kinds (:data:`KINDS`), :class:`Diagnosis`,
the per-path view of the findings (:class:`_PathView`) and the small helpers of the patterns."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

from eagle3_conformance.core.findings import Finding, as_finding, stored_path
from eagle3_conformance.core.notation import Boundary
from eagle3_conformance.engine_ids import engine_default_aux_ids

#: kind -> (fault-kinds.md kind, one line); the catalogue of diagnoses (docs and tests use it)
KINDS: dict[str, tuple[str, str]] = {
    "one-slot-input": ("K5", "the draft got 1 x d instead of the K x d concat; fc was skipped"),
    "other-model-width": ("K6", "every stored slot is another width than the target's: another model's states"),
    "fc-slot-count": ("K6", "the draft's fc built for fewer (or more) slots than the draft's ids: the count read from "
                            "another key (R41)"),
    "slot-count": ("K3", "fewer aux slots than declared (B_L unreachable)"),
    "decode-rows-padded": ("K13", "after a partial accept the draft gets padding rows for accepted tokens (R43)"),
    "decode-rows-misaligned": ("K9", "after a partial accept the draft gets the wrong verified rows (R52)"),
    "mtp-input-side": ("K4", "an MTP head fed B_L where F is stated, or the reverse (R49)"),
    "embedding-for-last": ("K2", "the embedding B_0 was captured in place of B_L"),
    "engine-default": ("K1", "the engine's (or generator's) default layers, not the declared ids"),
    "convention-shift": ("K2", "every aux slot one boundary off: ids read under the other convention"),
    "slots-permuted": ("K2", "the declared boundaries in another order"),
    "slot-off": ("K2", "some slots hold another boundary"),
    "reference-mismatch": ("", "no slot matches the reference: another checkpoint"),
    "not-a-boundary": ("K4", "a slot that is no residual-stream boundary"),
    "verifier-norm-state": ("K4", "verifier slot F where B_L is declared, or the reverse"),
    "magnitude": ("K4", "right direction, wrong magnitude against the reference"),
    "fp8-transport": ("K12", "FP8 training data read without its scales, or coarsened by the shared per-token scale"),
    "pre-fc-norm": ("K4", "the pre-fc norm the draft declares is missing on the path (or the reverse)"),
    "rows-misassigned": ("K13", "rows of other tokens or requests"),
    "hidden-without-residual": ("K4", "a layer's update captured without the residual (x + B_{k-1} = B_k)"),
    "verifier-slot-off": ("K3", "the verifier slot holds another boundary (the embedding, a mid layer) or none"),
    "verifier-missing": ("K3", "no verifier plane in the data although the contract declares verifier_last"),
    "production-precision": ("", "produced in lower precision than the contract declares (precision block)"),
    "generation-dtype": ("", "stored in another dtype than data_dtype, every slot's meaning intact: the generation "
                             "server's --dtype differs from the contract's"),
    "serving-dtype": ("", "the target was served in another dtype than precision.serving (the server's --dtype)"),
    "draft-accepts-nothing": ("", "the boundary conforms but the draft accepts almost nothing: its vocabulary "
                                  "mapping, weights or shared embedding / lm_head"),
    "draft-vocab-mapping": ("K10", "the draft checkpoint's d2t/t2d or lm_head contradict the target's vocabulary "
                                   "or the contract"),
    "final-norm-in-aux": ("K4", "an aux slot holds F (post final norm) where a pre-norm boundary is declared"),
}

#: checks whose failures a slot-identity pattern accounts for
_IDENTITY_CHECKS = ("slot_identity", "slot_order", "no_embedding", "row_fingerprint", "feature_alignment",
                    "engine_mapping", "magnitude", "norm_band", "cross_path")
_VERIFIER_CHECKS = ("verifier_identity", "verifier_norm_state", "target_alignment", "magnitude", "norm_band")


@dataclass(frozen=True)
class Diagnosis:
    """One fault named from the findings of a run.

    Attributes:
        kind: the diagnosis id, a key of :data:`KINDS` (e.g. ``"convention-shift"``).
        fault: the fault-kinds.md kind it cites (``"K2"``); ``""`` for an input problem that is not a
            fault-kinds.md kind (``reference-mismatch``).
        title: one sentence: what happened.
        evidence: lines, each a fact read from the findings.
        fix: lines, each a concrete change (ids to write and where, or the contract change).
        paths: the paths it was found on.
        slots: the slots it concerns ("slot 0", "verifier", "feature", "fc input").
        checks: the failing checks it accounts for.
        support: path -> "n/m": samples (or requests) showing the pattern / judged.
        ids: the fix in structured form, e.g. ``{"sglang": {...ToolIds...}, "contract": {...}}``.
    """

    kind: str
    fault: str
    title: str
    evidence: tuple[str, ...] = ()
    fix: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    slots: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    support: dict[str, str] = field(default_factory=dict, compare=False)
    ids: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "fault": self.fault, "title": self.title, "evidence": list(self.evidence),
                "fix": list(self.fix), "paths": list(self.paths), "slots": list(self.slots),
                "checks": list(self.checks), "support": dict(self.support), "ids": self.ids}

    @property
    def label(self) -> str:
        """``"K2 convention-shift"`` (``"input reference-mismatch"`` without a fault-kinds.md kind)."""
        return f"{self.fault or 'input'} {self.kind}"


# --- findings -> a per-path view ------------------------------------------------------------------


def _weight(f: Finding) -> int:
    """How many findings ``f`` stands for: a folded pass entry of ``--json-passes counts``
    (:func:`eagle3_conformance.report._pass_counts`) its ``count`` (an int >= 0), anything else 1."""
    n = f.count
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else 1


def _expand(findings: Iterable[Any]) -> list[Finding]:
    """Findings as :class:`Finding` objects, a folded entry with ``count`` n repeated n times (the
    same object, not copies), so that support counts ("n/m samples") and majorities are those
    of the full report."""
    out: list[Finding] = []
    for f in findings:
        x = as_finding(f)
        out.extend([x] * _weight(x))
    return out


def _parse(text: Any) -> Optional[Boundary]:
    try:
        return Boundary.parse(text) if isinstance(text, (str, Boundary)) else None
    except ValueError:
        return None


@dataclass
class _Judged:
    """One slot's identity over the samples of a path: declared boundary, the observed boundary
    most samples show, how many samples failed / were judged, and the first failing locator."""

    label: str
    declared: str
    observed: str
    fails: int
    judged: int
    where: str

    @property
    def wrong(self) -> bool:
        return self.observed != self.declared and self.fails * 2 > self.judged


def _slot_index(label: Optional[str]) -> int:
    try:
        return int(str(label).split()[-1])
    except (ValueError, IndexError):
        return 10**6


class _PathView:
    """The findings of one path, indexed by check and slot."""

    def __init__(self, path: str, findings: list[Finding], others_matched: tuple[str, ...] = ()):
        self.path = path
        self.findings = findings
        #: other paths of the same run on which the slots matched their declared boundaries (the
        #: reference is then the right checkpoint: never blamed)
        self.others_matched = others_matched
        #: every slot_identity / verifier_identity judgement of the run (all paths) passed
        self.slots_intact = False
        self.by_check: dict[str, list[Finding]] = {}
        for f in findings:
            self.by_check.setdefault(f.check, []).append(f)

    def failing(self, check: str) -> list[Finding]:
        return [f for f in self.by_check.get(check, []) if f.status == "fail"]

    def judged(self, check: str) -> dict[str, _Judged]:
        """slot label -> :class:`_Judged` from ``check``'s pass/fail findings (expected: the declared
        boundary, observed: the identified one)."""
        groups: dict[str, list[Finding]] = {}
        for f in self.by_check.get(check, []):
            if f.status in ("pass", "fail") and f.slot is not None:
                groups.setdefault(f.slot, []).append(f)
        out = {}
        for label, fs in groups.items():
            obs = Counter(str(f.observed) for f in fs)
            fails = [f for f in fs if f.status == "fail"]
            if fails:  # the most common observation among the failing samples
                top = Counter(str(f.observed) for f in fails).most_common(1)[0][0]
                if len(fails) * 2 <= len(fs):
                    top = obs.most_common(1)[0][0]
            else:
                top = obs.most_common(1)[0][0]
            out[label] = _Judged(label, str(fs[0].expected), top, len(fails), len(fs), fails[0].where if fails else "")
        return dict(sorted(out.items(), key=lambda kv: _slot_index(kv[0])))

    def aux(self) -> list[_Judged]:
        return [j for j in self.judged("slot_identity").values() if j.declared != "no slot"]

    def verifier(self) -> Optional[_Judged]:
        return self.judged("verifier_identity").get("verifier")

    @property
    def unit(self) -> str:
        return "samples" if stored_path(self.path) else "captures"

    def support(self, slots: Sequence[_Judged]) -> str:
        """``"n/m samples"``: how many of the judged samples show the pattern."""
        if not slots:
            return ""
        return f"{max(j.fails for j in slots)}/{max(j.judged for j in slots)} {self.unit}"


def _defaults(L: int) -> list[str]:
    """The default layers of SGLang (no ids) and speculators/vLLM: B_2, B_{L//2}, B_{L-3}."""
    return [f"B_{i}" for i in sorted(set(engine_default_aux_ids(L))) if 0 < i <= L]


def _idx(b: str) -> Optional[int]:
    p = _parse(b)
    return None if p is None or p.final else p.index


def _explained(view: _PathView, checks: Iterable[str], slots: Optional[Iterable[str]] = None) -> tuple[str, ...]:
    """The failing checks among ``checks`` on this path (restricted to ``slots`` where a finding
    has a slot label of that form)."""
    want = set(slots) if slots is not None else None
    out = []
    for chk in checks:
        for f in view.failing(chk):
            if want is not None and f.slot is not None and f.slot.startswith(("slot ", "verifier")) \
                    and f.slot not in want:
                continue
            out.append(chk)
            break
    return tuple(out)


