"""The kill matrix's invariance column: each variation's fault caused inside the real ``sglang.Engine``
the way its field report describes, and caught by the engine checked against itself (issue 45 item 1).

Each fault is an in-engine change through SGLang's own ``forward_hooks``
(:mod:`eagle3_conformance.tools.sglang_engine.fault_hooks`; ``chunk-end-target-guess`` puts back the
tail-token rule SGLang had before sgl-project/sglang#26329), active only under the condition of its
report (logprobs asked for, a prefix-cache hit, a batch, a chunk end, TP > 1), in every engine run of
the fault's run, the plain run's included. The baseline is the same variations without any fault;
a fault is ``caught`` only if the baseline passes the catching check on the fault's variation and
the faulty run fails it there (:func:`eagle3_conformance.faults.matrix.judge`), ``n/a`` when the
variation cannot run on this machine (SGLang's reason), and a generation that breaks is caught by
the engine itself (``engine_variations``: R102 crashed this way).

Faults whose conditions never meet (:attr:`InvarianceFault.group`) may share one engine run
(``grouped=True``): each is judged only on its own variation's findings, and each of the others'
variations in that run must still pass, so a shared run also shows each fault stays inside its
condition. One engine start per run (~2 min on the shared 2-core machine; chunked prefill and TP 2
need their own start): the column runs in the slow tier (tests/test_invariance_engine.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from eagle3_conformance.faults.matrix import Verdict, judge

CHECKS = ("engine_invariance", "engine_variations")


@dataclass(frozen=True)
class InvarianceFault:
    """One fault: ``name`` (a :data:`~eagle3_conformance.tools.sglang_engine.fault_hooks.FAULTS` name),
    ``variation`` (where it shows), ``report`` (the field report), ``kind`` (fault-kinds.md), ``how``
    (what the engine does wrong), ``group`` (faults of one group never meet the same condition)."""

    name: str
    variation: str
    report: str
    kind: str
    how: str
    group: int = 0


FAULTS: tuple[InvarianceFault, ...] = (
    InvarianceFault("chunk-end-target-guess", "chunked-prefill", "R84", "K13",
                    "at each chunk end inside the prompt the draft's input token is the target's guess, not the "
                    "prompt's next token (SGLang before #26329)"),
    InvarianceFault("logprob-aux-stale", "input-logprobs", "R102", "K13",
                    "a forward that returns input logprobs hands the draft the previous forward's aux rows"),
    InvarianceFault("logprob-aux-missing", "input-logprobs", "R102", "K13",
                    "a forward that returns input logprobs collected no aux states (zero rows)", group=1),
    InvarianceFault("cache-hit-normed-state", "prefix-cache-repeat", "R95", "K4",
                    "a request whose prefix hit the cache gets the normed state F in every aux slot (a later prefill "
                    "chunk reads its prefix from the cache too: not in chunk-end-target-guess's group)", group=1),
    InvarianceFault("batch-neighbour-rows", "batch", "R79, R105", "K13",
                    "in a batch, request b > 0 is handed request b - 1's rows (a neighbour's offset)"),
    InvarianceFault("tp-partial-sum", "tp2", "R87", "K8",
                    "under tensor parallelism the replicated aux states are summed as partial (x tp_size)"),
)


def _of(findings: list, variation: str) -> list:
    return [f for f in findings if f.where.split(": ")[0] == variation or f.where.endswith(f": {variation}")]


def _judged(c, vobs, names: list[str]) -> list:
    from eagle3_conformance.paths.sglang_engine_invariance import NAME, observation
    from eagle3_conformance.suite.assess import assess

    def no_reference():
        raise AssertionError("the invariance checks need no reference model")

    return assess(c, observation(vobs, names), no_reference, path=NAME)


def run_invariance_column(c, target_dir: Path, draft_dir: Path, prompts: list[list[int]], workdir: Path, *,
                          faults: tuple[InvarianceFault, ...] = FAULTS, grouped: bool = False, max_new_tokens: int = 8,
                          dtype: str = "float32", device: str = "cpu",
                          log: Callable[[str], None] = lambda s: None) -> dict:
    """Baseline (the faults' variations, no fault), then each fault (or each group, ``grouped``).

    Returns ``{"verdicts": {fault: Verdict}, "runs": {run: {"seconds": s, "engine_starts": n, "faults":
    [...]}}, "baseline_failures": [Finding], "baseline_cost": {...}, "spill": {fault: [Finding]}}``:
    ``spill`` lists failing findings of a grouped run on a variation whose fault is not in it."""
    from eagle3_conformance.tools.sglang_engine.variations import run_variations

    names = list(dict.fromkeys(f.variation for f in faults))
    runs: dict = {}

    def run(label: str, wanted: list[str], with_faults: tuple[str, ...]):
        t0 = time.perf_counter()
        vobs = run_variations(target_dir, draft_dir, prompts, names=wanted, path="sglang-engine-invariance",
                              max_new_tokens=max_new_tokens, device=device, dtype=dtype, workdir=workdir / label,
                              faults=with_faults, log=lambda s: log(f"{label}: {s}"))
        found = _judged(c, vobs, wanted)
        runs[label] = {"seconds": round(time.perf_counter() - t0, 1), "faults": list(with_faults),
                       "engine_starts": 1 + len({r for r in vobs.timings} - {"base"}), "unavailable": vobs.unavailable}
        return vobs, found

    base_obs, base = run("baseline", names, ())
    verdicts: dict[str, Verdict] = {}
    spill: dict[str, list] = {}
    batches = _batches(faults, grouped)
    for batch in batches:
        label = "+".join(f.name for f in batch)
        wanted = list(dict.fromkeys(f.variation for f in batch))
        if all(f.variation in base_obs.unavailable for f in batch):
            for f in batch:
                verdicts[f.name] = Verdict("n/a", detail=f"{f.variation}: {base_obs.unavailable[f.variation]}")
            continue
        vobs, found = run(label, wanted, tuple(f.name for f in batch))
        for f in batch:
            verdicts[f.name] = _verdict(f, base_obs, base, vobs, found)
            log(f"{f.report:>9} {f.name:<24} {verdicts[f.name].status} {verdicts[f.name].check or ''} "
                f"({runs[label]['seconds']:.0f} s, {label})")
        mine = {f.variation for f in batch}
        spill[label] = [x for x in found if x.status == "fail" and not any(x in _of(found, v) for v in mine)]
    return {"verdicts": verdicts, "runs": runs, "baseline_failures": [f for f in base if f.status == "fail"],
            "baseline_cost": base_obs.cost, "spill": spill}


def _batches(faults: tuple[InvarianceFault, ...], grouped: bool) -> list[list[InvarianceFault]]:
    if not grouped:
        return [[f] for f in faults]
    out: dict[int, list[InvarianceFault]] = {}
    for f in faults:
        out.setdefault(f.group, []).append(f)
    return list(out.values())


def _verdict(f: InvarianceFault, base_obs, base: list, vobs, found: list) -> Verdict:
    if f.variation in base_obs.unavailable or f.variation in vobs.unavailable:
        why = base_obs.unavailable.get(f.variation) or vobs.unavailable[f.variation]
        return Verdict("n/a", detail=f"{f.variation} cannot run here: {why}")
    return judge(CHECKS, _of(base, f.variation), _of(found, f.variation))


def caught_by(verdicts: dict[str, Verdict]) -> dict[str, Optional[str]]:
    """fault -> the check that caught it (None: not caught)."""
    return {k: v.check if v.status == "caught" else None for k, v in verdicts.items()}
