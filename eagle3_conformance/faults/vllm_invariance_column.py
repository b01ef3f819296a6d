"""The kill matrix's ``vllm-engine-invariance`` column: a variation's fault caused inside the real
``vllm.LLM`` the way its field report describes, and caught by the engine checked against itself
(issue 45 item 1; the SGLang column: :mod:`eagle3_conformance.faults.invariance_column`, whose fault
record, catching checks and judging this column shares).

Each fault is installed in vLLM's worker through ``LLM.collective_rpc`` (vLLM's own extension point,
:mod:`eagle3_conformance.tools.vllm_engine.fault_hooks`), active only under its report's condition, in
every engine run of the fault's run, the plain run's included. The baseline is the same variations
without a fault (or a run the caller already made of at least those variations: one engine start
saved); a fault is ``caught`` only if the baseline passes the catching check on the fault's variation
and the faulty run fails it there (:func:`eagle3_conformance.faults.matrix.judge`). One engine start
per run (~1-2 min on the shared 2-core machine): the column runs in the slow tier
(tests/test_vllm_invariance.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Optional

from eagle3_conformance.faults.invariance_column import CHECKS, InvarianceFault, _of
from eagle3_conformance.faults.matrix import Verdict, judge

FAULTS: tuple[InvarianceFault, ...] = (
    InvarianceFault("cache-hit-normed-state", "prefix-cache-repeat", "R95", "K4",
                    "a request whose prefix hit vLLM's prefix cache hands the draft the normed state F in every aux "
                    "slot on its recomputed rows"),
)


def judged(c, vobs, names: list[str]) -> list:
    """The findings of the path on the variations ``names`` of one variation run (no reference model is
    asked for; a run of more variations, the no-fault run a test made, is judged on these only)."""
    import dataclasses

    from eagle3_conformance.paths.vllm_engine_invariance import NAME, observation
    from eagle3_conformance.suite.assess import assess
    from eagle3_conformance.tools.shared.variations import Paired

    pr = vobs.paired
    vobs = dataclasses.replace(vobs, paired=Paired([(p, v) for p, v in pr.pairs if v.provenance.get("variation") in names],
                                                   [x for x in pr.notes if x.split(":")[0] in names],
                                                   {k: n for k, n in pr.counts.items() if k in names}))

    def no_reference():
        raise AssertionError("the invariance checks need no reference model")

    return assess(c, observation(vobs, names), no_reference, path=NAME)


def run_vllm_invariance_column(c, target_dir: Path, draft_dir: Path, prompts: list[list[int]], workdir: Path, *,
                               faults: tuple[InvarianceFault, ...] = FAULTS, baseline: Optional[Any] = None,
                               max_new_tokens: int = 8, dtype: str = "float32", device: str = "cpu",
                               log: Callable[[str], None] = lambda s: None) -> dict:
    """The baseline (``baseline``: a :class:`~eagle3_conformance.tools.vllm_engine.variations.VariationObservation`
    of at least the faults' variations, else run here), then each fault in its own run of its variation.

    Returns ``{"verdicts": {fault: Verdict}, "runs": {label: {"seconds", "engine_starts", "faults"}},
    "baseline_failures": [Finding], "findings": {fault: [Finding]}}``."""
    from eagle3_conformance.tools.vllm_engine.variations import run_variations

    names = list(dict.fromkeys(f.variation for f in faults))
    runs: dict = {}

    def run(label: str, wanted: list[str], with_faults: tuple[str, ...]):
        t0 = time.perf_counter()
        vobs = run_variations(target_dir, draft_dir, prompts, names=wanted, max_new_tokens=max_new_tokens,
                              device=device, dtype=dtype, workdir=workdir / label, faults=with_faults,
                              log=lambda s: log(f"{label}: {s}"))
        runs[label] = {"seconds": round(time.perf_counter() - t0, 1), "faults": list(with_faults),
                       "engine_starts": len(vobs.timings)}
        return vobs

    base_obs = baseline if baseline is not None else run("baseline", names, ())
    base = judged(c, base_obs, [n for n in names if n in base_obs.paired.counts])
    verdicts: dict[str, Verdict] = {}
    findings: dict[str, list] = {}
    for f in faults:
        vobs = run(f.name, [f.variation], (f.name,))
        found = judged(c, vobs, [f.variation])
        findings[f.name] = found
        verdicts[f.name] = judge(CHECKS, _of(base, f.variation), _of(found, f.variation))
        log(f"{f.report:>9} {f.name:<24} {verdicts[f.name].status} {verdicts[f.name].check or ''} "
            f"({runs[f.name]['seconds']:.0f} s)")
    return {"verdicts": verdicts, "runs": runs, "baseline_failures": [x for x in base if x.status == "fail"],
            "findings": findings}
