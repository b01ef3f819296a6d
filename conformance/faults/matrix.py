"""The kill matrix: every operator on every path of its scenario(s), each judged against the
unmutated baseline of the same run.

A cell reads ``caught`` only if, in the same run, the unmutated scenario passes the catching
check and the mutated one fails it (:func:`judge`); nothing is hard-coded. Rendering is in
:mod:`conformance.faults.render`.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from conformance import paths as registered_paths
from conformance.contract import Contract
from conformance.faults.example import Example, NoOp, default_example
from conformance.faults.inject_sglang import HarnessPool
from conformance.faults.operators import KINDS, OPERATORS, NotApplicable, Operator
from conformance.faults.runs import INJECTORS, run_path
from conformance.faults.scenario import Scenario, ScenarioSpec, build_scenario
from conformance.findings import Finding

PATHS = tuple(name for name in registered_paths.names() if name in INJECTORS)
"""The matrix's columns: registered paths with a fault injector (``training``, ``sglang-extend``,
``sglang-decode``)."""


@dataclass
class Verdict:
    status: str  # "caught" | "missed" | "n/a" | "noop"
    check: Optional[str] = None
    detail: str = ""
    baseline_failures: list[Finding] = field(default_factory=list)


def judge(checks: Sequence[str], base: list[Finding], mut: list[Finding]) -> Verdict:
    """``caught`` by check X iff the baseline has X passing (and not failing) and the mutated
    run fails X. Baseline failures of any check are returned too (false positives)."""
    bfail = [f for f in base if f.status == "fail"]
    for chk in checks:
        b = [f for f in base if f.check == chk]
        if not b or any(f.status == "fail" for f in b) or not any(f.status == "pass" for f in b):
            continue
        m = [f for f in mut if f.check == chk and f.status == "fail"]
        if m:
            return Verdict("caught", chk, m[0].message, bfail)
    why = "; ".join(sorted({f"{f.check}: {f.status}" for f in mut if f.check in checks})) or "no finding"
    return Verdict("missed", None, f"no catching check failed on the mutated run while passing on the baseline ({why})",
                   bfail)


def evaluate(op: Operator, path: str, scn: Scenario, contract: Contract, ex: Example,
             pool: Optional[HarnessPool], base: Optional[list[Finding]] = None) -> Verdict:
    """Run the baseline (unless given) and the mutated input for one operator on one path."""
    ap = op.paths[path]
    if isinstance(ap, NotApplicable):
        return Verdict("n/a", detail=ap.reason)
    k = ap.fn(scn, contract, ex)
    if k is None:
        return Verdict("noop", detail="the fault is a no-op on this example")
    if base is None:
        base = run_path(scn, contract, ex, path, pool)
    try:
        mut = run_path(scn, contract, ex, path, pool, k)
    except NoOp as e:
        return Verdict("noop", detail=str(e))
    return judge(op.checks, base, mut)


MATRIX_SCENARIOS = {
    # non-default boundaries (SGLang defaults for L=8 are [2,4,5]); shift +1 stays reachable
    "base": ScenarioSpec("base", layers=8, target_hidden=64, draft_hidden=64, boundaries=(3, 5, 6), seed=11),
    # aux includes B_L (training only: llama.py never reaches L)
    "final": ScenarioSpec("final", layers=8, target_hidden=64, draft_hidden=64, boundaries=(3, 5, 8), seed=11),
    # target 96, draft 64 (K6 is masked when the widths are equal)
    "wide": ScenarioSpec("wide", layers=8, target_hidden=96, draft_hidden=64, boundaries=(3, 5, 6), seed=12),
}


def _op_scenarios(op: Operator, path: str) -> list[str]:
    if op.scenario == "wide":
        return ["wide"]
    if op.scenario == "final+base":
        return ["final"] if path == "training" else ["base"]
    return ["base"]


@dataclass
class Cell:
    kind: str
    path: str
    status: str
    operators: list[tuple[str, Verdict]]

    @property
    def checks(self) -> list[str]:
        return sorted({v.check for _, v in self.operators if v.check})


def run_matrix(workdir: Optional[Path] = None, sglang: Optional[bool] = None,
               log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Run every operator on every path of its scenario(s); returns ``{"cells", "operators",
    "false_positives", "timings"}``. SGLang paths are skipped (reported ``not run``) when SGLang
    is not installed. The baseline of each (scenario, path) runs once and must be free of
    failures; each operator's mutated run is judged against it."""
    import importlib.util

    t_start = time.perf_counter()
    if sglang is None:
        sglang = importlib.util.find_spec("sglang") is not None
    own = workdir is None
    workdir = Path(workdir or tempfile.mkdtemp(prefix="conformance-faults-"))
    pool = HarnessPool()
    results: dict[tuple[str, str], Verdict] = {}
    false_pos: list[dict] = []
    timings: dict[str, float] = {}
    try:
        scns: dict[str, Scenario] = {}
        exs: dict[str, Example] = {}
        contracts: dict[str, Contract] = {}
        for name, spec in MATRIX_SCENARIOS.items():
            t0 = time.perf_counter()
            scns[name] = build_scenario(spec, workdir / name, for_sglang=sglang and name != "final")
            exs[name] = default_example(scns[name])
            contracts[name] = scns[name].contract(extra_tokens=exs[name].tokens())
            timings[f"build {name}"] = time.perf_counter() - t0
        # group work per (scenario, path, harness variant) so that each harness is built once
        work: dict[tuple[str, str], list[Operator]] = {}
        for op in OPERATORS:
            for path in PATHS:
                if isinstance(op.paths[path], NotApplicable):
                    results[(op.name, path)] = Verdict("n/a", detail=op.paths[path].reason)
                    continue
                if path != "training" and not sglang:
                    results[(op.name, path)] = Verdict("not run", detail="SGLang is not installed")
                    continue
                for sname in _op_scenarios(op, path):
                    work.setdefault((sname, path), []).append(op)
        for (sname, path), ops in sorted(work.items(), key=lambda kv: (kv[0][1] != "training", kv[0])):
            scn, c, ex = scns[sname], contracts[sname], exs[sname]
            t0 = time.perf_counter()
            base = run_path(scn, c, ex, path, pool)
            bad = [f for f in base if f.status == "fail"]
            for f in bad:
                false_pos.append({"scenario": sname, **f.to_json()})
            # knobs that need no rebuild first, then each rebuild variant once
            knobbed = [(op, op.paths[path].fn(scn, c, ex)) for op in ops]
            knobbed.sort(key=lambda t: (bool(t[1] and t[1].variant),
                                        json.dumps((t[1].variant if t[1] else None) or {}, sort_keys=True)))
            for op, k in knobbed:
                if k is None:
                    results[(op.name, path)] = Verdict("noop", detail="no-op on the matrix example")
                    continue
                try:
                    mut = run_path(scn, c, ex, path, pool, k)
                except NoOp as e:
                    results[(op.name, path)] = Verdict("noop", detail=str(e))
                    continue
                v = judge(op.checks, base, mut)
                results[(op.name, path)] = v
                log(f"{op.kind:>4} {op.name:<30} {path:<14} {sname:<6} {v.status} {v.check or ''}")
            timings[f"{sname} {path}"] = time.perf_counter() - t0
    finally:
        pool.close()
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    timings["harness builds"] = pool.build_s
    timings["total"] = time.perf_counter() - t_start
    cells = []
    for kind in KINDS:
        for path in PATHS:
            vs = [(op.name, results[(op.name, path)]) for op in OPERATORS if op.kind == kind]
            sts = [v.status for _, v in vs]
            if not vs:
                st = "missed"
            elif any(s in ("missed", "noop") for s in sts):
                st = "missed"
            elif all(s == "n/a" for s in sts):
                st = "n/a"
            elif "not run" in sts:
                st = "not run"
            else:
                st = "caught"
            cells.append(Cell(kind, path, st, vs))
    return {"cells": cells, "results": results, "false_positives": false_pos, "timings": timings,
            "harness_builds": pool.builds}
