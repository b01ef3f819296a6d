"""The kill matrix: every operator on every path of its scenario(s), each judged against the
unmutated baseline of the same run.

A cell reads ``caught`` only if, in the same run, the unmutated scenario passes the catching
check and the mutated one fails it (:func:`judge`); nothing is hard-coded. Rendering is in
:mod:`eagle3_conformance.faults.render`.
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

from eagle3_conformance import paths as registered_paths
from eagle3_conformance.contract import Contract
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.faults.example import EngineRefuses, Example, Knobs, NoOp, default_example
from eagle3_conformance.faults.inject_sglang import HarnessPool
from eagle3_conformance.faults.operators import KINDS, OPERATORS, NotApplicable, Operator
from eagle3_conformance.faults.runs import INJECTORS, POOLED, path_contract, run_path
from eagle3_conformance.faults.scenario import Scenario, ScenarioSpec, build_scenario

PATHS = tuple(name for name in registered_paths.names() if name in INJECTORS)
"""The matrix's columns: registered paths with a fault injector (``training``, ``specforge``,
``sglang-extend``, ``sglang-decode``, ``vllm-extend``)."""


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
    contract = path_contract(scn, contract, path)
    k = ap.fn(scn, contract, ex)
    if k is None:
        return Verdict("noop", detail="the fault is a no-op on this example")
    if ap.baseline is not None:  # the operator's own unmutated input (e.g. correct FP8 data)
        base = run_path(scn, contract, ex, path, pool, ap.baseline(scn, contract, ex))
    elif base is None:
        base = run_path(scn, contract, ex, path, pool)
    try:
        mut = run_path(scn, contract, ex, path, pool, k)
    except NoOp as e:
        return Verdict("noop", detail=str(e))
    except EngineRefuses as e:
        return Verdict("n/a", detail=f"the engine refuses it loudly: {e}")
    return judge(op.checks, base, mut)


MATRIX_SCENARIOS = {
    # non-default boundaries (SGLang defaults for L=8 are [2,4,5]); shift +1 stays reachable
    "base": ScenarioSpec("base", layers=8, target_hidden=64, draft_hidden=64, boundaries=(3, 5, 6), seed=11),
    # aux includes B_L (training only: llama.py never reaches L)
    "final": ScenarioSpec("final", layers=8, target_hidden=64, draft_hidden=64, boundaries=(3, 5, 8), seed=11),
    # target 96, draft 64 (K6 is masked when the widths are equal)
    "wide": ScenarioSpec("wide", layers=8, target_hidden=96, draft_hidden=64, boundaries=(3, 5, 6), seed=12),
    # four aux slots (a draft trained on 4 layers, R41 in fault-kinds.md: a 3-slot default masks a slot-count key)
    "four": ScenarioSpec("four", layers=8, target_hidden=64, draft_hidden=64, boundaries=(1, 3, 5, 6), seed=13),
}


_NO_SCENARIO = {
    "wide": "needs a draft narrower than its target; this pair's draft is as wide as its target",
    "four": "needs a 4-slot draft; this pair's draft has 3 aux slots",
}
"""Why an operator's scenario is absent from a run (a real pair has only ``base`` and ``final``)."""


def _op_scenarios(op: Operator, path: str) -> list[str]:
    if op.scenario in ("wide", "four"):
        return [op.scenario]
    if op.scenario == "final+base":
        return ["final"] if path in ("training", "specforge") else ["base"]
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


def _needs_sglang(path: str) -> bool:
    return "sglang" in registered_paths.get(path).needs.modules


def _missing_module(path: str) -> Optional[str]:
    """The first module ``path`` runs that is not installed here (None: all are), e.g. ``vllm``
    outside ``tox -e vllm``: its column then reads ``not run``."""
    return next((m for m in registered_paths.get(path).needs.modules if importlib.util.find_spec(m) is None), None)


def _build_scenarios(workdir: Path, sglang: bool, timings: dict[str, float], pair: Optional[str] = None) -> dict[str, tuple]:
    """``{scenario name: (scenario, contract, example)}`` for every matrix scenario: the synthetic
    ones, or with ``pair`` the real pair's (:mod:`eagle3_conformance.faults.real_scenario`: ``base`` and
    ``final``; no ``wide``, its draft is as wide as its target)."""
    from eagle3_conformance.faults.real_scenario import build_real_scenario

    out = {}
    names = ("base", "final") if pair else tuple(MATRIX_SCENARIOS)
    for name in names:
        t0 = time.perf_counter()
        engine = sglang or importlib.util.find_spec("vllm") is not None  # an engine harness needs the HF target
        for_engine = engine and name != "final"
        if pair:
            scn = build_real_scenario(pair, f"{pair}-{name}", name == "final", workdir / name, for_sglang=for_engine)
        else:
            scn = build_scenario(MATRIX_SCENARIOS[name], workdir / name, for_sglang=for_engine)
        ex = default_example(scn)
        out[name] = (scn, scn.contract(extra_tokens=ex.tokens()), ex)
        timings[f"build {name}"] = time.perf_counter() - t0
    return out


def _plan(sglang: bool, results: dict[tuple[str, str], Verdict], columns: Sequence[str] = PATHS,
          scenarios: Sequence[str] = tuple(MATRIX_SCENARIOS)) -> dict[tuple[str, str], list[Operator]]:
    """The operators to run per (scenario, path), grouped so that each harness is built once;
    verdicts of operators that do not apply (or cannot run here) go straight to ``results``."""
    work: dict[tuple[str, str], list[Operator]] = {}
    for op in OPERATORS:
        for path in columns:
            how = op.paths[path]
            if isinstance(how, NotApplicable):
                results[(op.name, path)] = Verdict("n/a", detail=how.reason)
                continue
            if _needs_sglang(path) and not sglang:
                results[(op.name, path)] = Verdict("not run", detail="SGLang is not installed")
                continue
            missing = _missing_module(path)
            if missing is not None:
                results[(op.name, path)] = Verdict("not run", detail=f"{missing} is not installed (its column runs "
                                                                     "in its own environment, e.g. tox -e vllm)")
                continue
            names = _op_scenarios(op, path)
            if not all(n in scenarios for n in names):
                results[(op.name, path)] = Verdict("n/a", detail=_NO_SCENARIO[op.scenario])
                continue
            for sname in names:
                work.setdefault((sname, path), []).append(op)
    return work


def _run_group(sname: str, group: list[tuple[str, list[Operator]]], world: tuple, pool: HarnessPool,
               results: dict[tuple[str, str], Verdict], false_pos: list[dict], log: Callable[[str], None],
               timings: dict[str, float]) -> None:
    """The baseline of (scenario, path) once per path of ``group``, then every operator's mutated run judged
    against its path's baseline. The runs of all the group's paths (one scenario's SGLang CPU paths: one
    harness pool) are ordered by the harness they need: the knobs that need no rebuild first, then each
    rebuild variant once for every path (a harness is built once per scenario and variant, not per path)."""
    scn, c0, ex = world
    runs = []
    for path, ops in group:
        t0 = time.perf_counter()
        c = path_contract(scn, c0, path)
        base = run_path(scn, c, ex, path, pool)
        false_pos += [{"scenario": sname, **f.to_json()} for f in base if f.status == "fail"]
        runs += [(path, c, base, op, op.apply_on(path).fn(scn, c, ex)) for op in ops]
        timings[f"{sname} {path}"] = timings.get(f"{sname} {path}", 0.0) + time.perf_counter() - t0
    runs.sort(key=lambda t: (bool(t[4] and t[4].variant), json.dumps((t[4].variant if t[4] else None) or {},
                                                                        sort_keys=True)))
    for path, c, base, op, k in runs:
        t0 = time.perf_counter()
        _run_op(sname, path, c, base, op, k, world, pool, results, false_pos, log)
        timings[f"{sname} {path}"] += time.perf_counter() - t0


def _run_op(sname: str, path: str, c: Contract, base: list[Finding], op: Operator, k: Optional[Knobs], world: tuple,
            pool: HarnessPool, results: dict[tuple[str, str], Verdict], false_pos: list[dict],
            log: Callable[[str], None]) -> None:
    """One operator's mutated run on ``path`` (knobs ``k``; None: a no-op there), judged against ``base``."""
    scn, _, ex = world
    if k is None:
        results[(op.name, path)] = Verdict("noop", detail="no-op on the matrix example")
        return
    own = op.apply_on(path).baseline
    b = base
    if own is not None:  # the operator's own unmutated input (e.g. correct FP8 data), judged like the shared one
        b = run_path(scn, c, ex, path, pool, own(scn, c, ex))
        false_pos += [{"scenario": sname, "operator_baseline": op.name, **f.to_json()}
                      for f in b if f.status == "fail"]
    try:
        mut = run_path(scn, c, ex, path, pool, k)
    except NoOp as e:
        results[(op.name, path)] = Verdict("noop", detail=str(e))
        return
    except EngineRefuses as e:
        results[(op.name, path)] = Verdict("n/a", detail=f"the engine refuses it loudly: {e}")
        log(f"{op.kind:>4} {op.name:<30} {path:<14} {sname:<6} n/a (engine refuses: {e})")
        return
    v = judge(op.checks, b, mut)
    results[(op.name, path)] = v
    log(f"{op.kind:>4} {op.name:<30} {path:<14} {sname:<6} {v.status} {v.check or ''}")


def _groups(work: dict[tuple[str, str], list[Operator]]) -> list[tuple[str, list[tuple[str, list[Operator]]]]]:
    """``work`` in run order (the paths that need no engine first, then by scenario and path), one group per
    (scenario, path), except that one scenario's paths on the SGLang harness pool (:data:`POOLED`) are one group."""
    order = sorted(work.items(), key=lambda kv: (bool(registered_paths.get(kv[0][1]).needs.modules), kv[0]))
    out: list[tuple[str, list[tuple[str, list[Operator]]]]] = []
    for (sname, path), ops in order:
        prev = out[-1] if out else None
        if prev is not None and prev[0] == sname and path in POOLED and prev[1][-1][0] in POOLED:
            prev[1].append((path, ops))
        else:
            out.append((sname, [(path, ops)]))
    return out


def _cell_status(statuses: list[str]) -> str:
    if not statuses or any(s in ("missed", "noop") for s in statuses):
        return "missed"
    if all(s == "n/a" for s in statuses):
        return "n/a"
    return "not run" if "not run" in statuses else "caught"


def _cells(results: dict[tuple[str, str], Verdict], columns: Sequence[str] = PATHS) -> list[Cell]:
    """One cell per (kind, path): every operator of the kind must be caught (or not apply)."""
    cells = []
    for kind in KINDS:
        for path in columns:
            vs = [(op.name, results[(op.name, path)]) for op in OPERATORS if op.kind == kind]
            cells.append(Cell(kind, path, _cell_status([v.status for _, v in vs]), vs))
    return cells


def run_matrix(workdir: Optional[Path] = None, sglang: Optional[bool] = None,
               log: Callable[[str], None] = lambda s: None, paths: Optional[Sequence[str]] = None,
               pair: Optional[str] = None) -> dict[str, Any]:
    """Run every operator on every path of its scenario(s); returns ``{"paths", "cells", "results",
    "false_positives", "timings", "harness_builds", "pair"}``. A path whose tool is not installed
    (SGLang, vLLM) is reported ``not run``. The baseline of each (scenario, path) runs once and must
    be free of failures; each operator's mutated run is judged against it.

    Args:
        paths: only these columns (default: all, :data:`PATHS`).
        pair: a real pair of :data:`eagle3_conformance.faults.real_scenario.REAL_PAIRS` (e.g.
            ``"smollm2-135m"``) instead of the synthetic scenarios.

    Raises:
        ValueError: ``paths`` names a path that is not a matrix column.
        eagle3_conformance.faults.real_scenario.RealPairUnavailable: ``pair`` is unknown or cannot be built.
    """
    columns = tuple(PATHS if paths is None else paths)
    unknown = [p for p in columns if p not in PATHS]
    if unknown:
        raise ValueError(f"not a kill-matrix path: {', '.join(unknown)}; columns: {', '.join(PATHS)}")
    t_start = time.perf_counter()
    if sglang is None:
        sglang = importlib.util.find_spec("sglang") is not None
    own = workdir is None
    workdir = Path(workdir or tempfile.mkdtemp(prefix="conformance-faults-"))
    pool = HarnessPool()
    import eagle3_conformance.faults.inject_vllm as inject_vllm  # its harness pool lives for the process (vLLM groups)

    v0 = (inject_vllm._POOL.builds, inject_vllm._POOL.build_s)
    results: dict[tuple[str, str], Verdict] = {}
    false_pos: list[dict] = []
    timings: dict[str, float] = {}
    try:
        worlds = _build_scenarios(workdir, sglang, timings, pair)
        work = _plan(sglang, results, columns, tuple(worlds))
        for sname, group in _groups(work):
            _run_group(sname, group, worlds[sname], pool, results, false_pos, log, timings)
    finally:
        pool.close()
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    timings["harness builds"] = pool.build_s
    timings["vllm harness builds"] = inject_vllm._POOL.build_s - v0[1]
    timings["total"] = time.perf_counter() - t_start
    return {"paths": columns, "cells": _cells(results, columns), "results": results, "false_positives": false_pos,
            "timings": timings, "harness_builds": pool.builds, "vllm_harness_builds": inject_vllm._POOL.builds - v0[0],
            "pair": pair}
