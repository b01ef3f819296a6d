"""The upgrade gate: what each version of a tool captures for each contract, side by side.

For every contract and every requested tool version (``sglang==0.5.12``, ``vllm==0.33.0:v2``),
the version's *own* code is fetched (:mod:`eagle3_conformance.released.fetch`) and run in isolation
(:mod:`eagle3_conformance.released.sglang`, :mod:`eagle3_conformance.released.vllm`) on the draft
config the contract describes: its reader finds the ids, its target class's setter stores them, and
the capture loop's meaning turns them into boundaries (B_k), per step where a version differs
between steps (SGLang <= 0.5.10.post1 captured its CUDA graphs, which serve target verify and
decode, with the default ids). No rule is written down here.

Then each candidate (``--to``) is compared with the baseline (``--from``), slot by slot: a slot
whose boundary differs is a :class:`SlotChange` naming both boundaries and the source line of
each version's rule; a version whose own code refuses the contract (no setter for the architecture,
its setter raises) against one that accepts it is a difference too. Statuses per contract and
candidate: ``same tensors``, ``different tensors``, ``slots not captured`` or ``not the contract's
tensors`` (both versions alike, neither capturing the contract's slots), ``refused by both``,
``cannot run`` (a version's rule could not be run in isolation or could not be fetched: the
caller exits 2), ``not compared`` (the method reads no layer ids in that tool: MTP).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from eagle3_conformance.core.errors import UsageError
from eagle3_conformance.core.exit_codes import ExitCode
from eagle3_conformance.released.result import (
    BOTH_REFUSE,
    CANNOT,
    DIFFERENT,
    NOT_COMPARED,
    NOT_CONTRACT,
    SAME,
    SHORT,
    STEPS,
    Capture,
    Source,
    Spec,
    parse_spec,
)

__all__ = ["check", "compare", "parse_spec", "Report", "ContractResult", "Verdict", "SlotChange"]

@dataclass
class SlotChange:
    """A slot whose tensor differs between the baseline and a candidate."""

    step: str
    slot: int
    from_boundary: Optional[str]
    to_boundary: Optional[str]
    from_id: Optional[int]
    to_id: Optional[int]
    from_rule: str
    to_rule: str


@dataclass
class Verdict:
    """The baseline ``base`` against one candidate ``to``: ``status`` and the changed slots."""

    base: str
    to: str
    status: str
    changes: list[SlotChange] = field(default_factory=list)
    reason: str = ""


@dataclass
class ContractResult:
    """One contract: every column's capture and a verdict per candidate."""

    contract: str
    name: str
    method: str
    architecture: str
    num_hidden_layers: int
    captures: list[Capture]
    verdicts: list[Verdict]
    error: str = ""


@dataclass
class Report:
    """Everything upgrade-check found; ``exit_code``: 2 when anything could not be run or
    fetched, else 1 when any draft would receive different tensors, else 0."""

    baseline: str
    candidates: list[str]
    sources: list[Source]
    contracts: list[ContractResult]
    seconds: float

    @property
    def exit_code(self) -> ExitCode:
        if any(s.error for s in self.sources) or any(r.error for r in self.contracts) or any(
                v.status == CANNOT for r in self.contracts for v in r.verdicts):
            return ExitCode.INPUT_ERROR
        found = (DIFFERENT, SHORT, NOT_CONTRACT)
        return (ExitCode.VIOLATIONS if any(v.status in found for r in self.contracts for v in r.verdicts)
                else ExitCode.CONFORMS)

    def to_json(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "candidates": self.candidates, "exit_code": self.exit_code,
                "seconds": round(self.seconds, 2), "sources": [asdict(s) for s in self.sources],
                "contracts": [asdict(c) for c in self.contracts]}


def compare(base: Capture, cand: Capture, declared: Sequence[str] = (),
            serves: Sequence[str] = ("sglang",)) -> Verdict:
    """Slot-by-slot comparison of two captures of one contract; ``declared``: the contract's aux
    boundaries, ``serves``: the tools that serve the draft (see :func:`_against_contract`)."""
    return _against_contract(_compare(base, cand), declared, (base, cand), serves)


def _compare(base: Capture, cand: Capture) -> Verdict:
    if cand.status == NOT_COMPARED or base.status == NOT_COMPARED:
        return Verdict(base.column, cand.column, NOT_COMPARED, reason=cand.error or base.error)
    if CANNOT in (base.status, cand.status):
        return Verdict(base.column, cand.column, CANNOT, reason=" | ".join(e for e in (base.error, cand.error) if e))
    if base.status == "refused" or cand.status == "refused":
        same = base.status == cand.status
        reason = " | ".join(c.error for c in (base, cand) if c.error)
        return Verdict(base.column, cand.column, BOTH_REFUSE if same else DIFFERENT, reason=reason)
    changes = []
    for step in STEPS:
        a, b = base.steps[step], cand.steps[step]
        for j in range(max(len(a.boundaries), len(b.boundaries))):
            fa = a.boundaries[j] if j < len(a.boundaries) else None
            fb = b.boundaries[j] if j < len(b.boundaries) else None
            if fa != fb:
                changes.append(SlotChange(step, j, fa, fb, a.slot_ids[j] if fa else None,
                                          b.slot_ids[j] if fb else None, a.rule, b.rule))
    return Verdict(base.column, cand.column, DIFFERENT if changes else SAME, changes)


def check(contracts: list[str], baseline: list[Spec], candidates: list[Spec]) -> Report:
    """Run every contract through every version (see the module docstring).

    Raises:
        UsageError: no contracts or no specs (a contract that does not load or a version that
            cannot be fetched is reported in the result instead, with exit code 2).
    """
    from eagle3_conformance.released.capture import capture, load_sources

    if not contracts:
        raise UsageError("no contracts given")
    t0 = time.perf_counter()
    specs = list(dict.fromkeys(baseline + candidates))
    sources, trees = load_sources(specs)
    why = {s.column: s.error for s in sources if s.error}
    results = []
    for path in contracts:
        results.append(_one(path, specs, trees, baseline, candidates,
                            lambda c, s, tree: capture(c, s, tree, why.get(s.label, ""))))
    return Report(" + ".join(s.label for s in baseline), [s.label for s in candidates], sources, results,
                  time.perf_counter() - t0)


def _one(path: str, specs: list[Spec], trees: dict, baseline: list[Spec], candidates: list[Spec],
         capture) -> ContractResult:
    from eagle3_conformance.authoring.gate import gated_contract, refusal_lines
    from eagle3_conformance.contract import ContractError

    try:  # the contract gate every verb applies (validate's checks); its lines whole, never cut
        c = gated_contract(path)
    except ContractError as e:
        return ContractResult(path, Path(path).stem, "?", "?", 0, [], [],
                              error="does not load (refused by validate's checks):\n" + "\n".join(refusal_lines(e, path)))
    except OSError as e:
        return ContractResult(path, Path(path).stem, "?", "?", 0, [], [], error=f"cannot be read: {e}")
    caps = {s: capture(c, s, trees.get(s)) for s in specs}
    declared = [str(b) for b in c.capture.boundaries]
    serves = ("sglang", "vllm") if c.engines.vllm is not None else ("sglang",)
    verdicts = [compare(caps[b], caps[t], declared, serves) for b in baseline for t in candidates if t != b]
    return ContractResult(path, c.name, c.method, c.target.architecture, c.L, list(caps.values()), verdicts)


def _against_contract(v: Verdict, declared: Sequence[str], caps: tuple[Capture, Capture],
                      serves: Sequence[str] = ("sglang",)) -> Verdict:
    """``v``, or a finding when a version does not capture the contract's slots: ``slots not captured``
    when it captures fewer than the contract declares (SGLang drops an out-of-range id silently), ``not the
    contract's tensors`` when it captures as many but other boundaries (SGLang ignoring a top-level id list
    and serving its defaults). Two versions alike capture the same tensors, but not the contract's: the
    upgrade changes nothing and the draft is already fed other tensors than it was trained on. The second
    holds for the engines that serve the draft (``serves``: SGLang, and vLLM where the contract states
    ``engines.vllm``): a training tool reads ids translated for it (``translate --to speculators``), not
    the serving config the contract describes, so its reading of that config is not held to the contract."""
    short, other = [], []
    for cap in caps:
        serving = cap.column.split("==")[0] in serves
        steps = {} if cap.status != "ok" else {s: cap.steps[s].boundaries for s in STEPS}
        alike = len({tuple(b) for b in steps.values()}) == 1
        for step, got in (list(steps.items())[:1] if alike else steps.items()):
            where = f"{cap.column}{'' if alike else ' ' + step}"
            if len(got) < len(declared):
                lost = [f"slot {k} ({b})" for k, b in enumerate(declared) if b not in got]
                short.append(f"{where} captures {len(got)} slots {' '.join(got)}, "
                             f"the contract declares {len(declared)}: contract {', '.join(lost) or 'slots'} not captured")
            elif serving and declared and list(got[:len(declared)]) != list(declared):
                moved = [f"slot {k} {g} (contract {b})" for k, (g, b) in enumerate(zip(got, declared)) if g != b]
                other.append((where, f"captures {' '.join(got)}, the contract declares {' '.join(declared)}: "
                                     f"{', '.join(moved)}"))
    if not (short or other) or v.status not in (SAME, DIFFERENT):
        return v
    status = DIFFERENT if v.status == DIFFERENT else SHORT if short else NOT_CONTRACT
    said: dict[str, list[str]] = {}  # one line per distinct capture, naming every column that makes it
    for where, what in other:
        said.setdefault(what, []).append(where)
    lines = short + [f"{' and '.join(w)} {what}" for what, w in said.items()]
    return Verdict(v.base, v.to, status, v.changes,
                   "; ".join(dict.fromkeys(lines)) + (f" | {v.reason}" if v.reason else ""))
