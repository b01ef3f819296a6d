"""What the ``vllm-engine-invariance`` kill-matrix column's ``tox -e vllm-cpu`` part costs: its fault run
(``cache-hit-normed-state``, ``batch-neighbour-rows``, ``logprob-aux-stale`` in one engine start: the base
run's plain, batch, input-logprobs and prefix-cache-repeat phases) beside the R95-only fault run it
replaced (plain and prefix-cache-repeat), side by side in one process, A B A (docs/faults.md, "The vLLM
invariance column"). Needs vllm-cpu 0.32.0 (the ``vllm-cpu`` tox environment):

    PYTHONPATH=. .tox/vllm-cpu-lock/bin/python benchmarks/bench_vllm_invariance_column.py [--repeat N]

Prints each run's wall seconds and its phases' seconds (vLLM's start, each phase's generate, shutdown).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1, help="A B A rounds (default 1)")
    a = ap.parse_args()
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.faults.vllm_invariance_column import DEFAULT
    from eagle3_conformance.paths.vllm_engine_invariance import held_out_prompts
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft
    from eagle3_conformance.tools.vllm_engine.pair import vllm_form_draft, vllm_problem
    from eagle3_conformance.tools.vllm_engine.variations import run_variations

    why = vllm_problem(cuda=False)
    if why:
        print(why)
        return 2
    c = load_contract(ROOT / "contracts" / "smollm2-135m.yaml")
    t = ensure_trained_draft(RECIPE)
    prompts = held_out_prompts(t.target_dir, 2)
    runs = {"R95 only": (["prefix-cache-repeat"], ("cache-hit-normed-state",)),
            "group 0": ([f.variation for f in DEFAULT], tuple(f.name for f in DEFAULT))}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        draft = vllm_form_draft(c, Path(t.draft_dir), work)
        for r in range(a.repeat):
            for label in ("R95 only", "group 0", "R95 only"):
                names, faults = runs[label]
                t0 = time.perf_counter()
                v = run_variations(t.target_dir, draft, prompts, names=names, workdir=work / f"{r}-{label}", faults=faults)
                phases = ", ".join(f"{k.removesuffix('_s')} {s:.1f}" for k, s in v.timings["base"].items()
                                   if k != "wall_s" and k != "generate_s")
                print(f"{label:<9} {time.perf_counter() - t0:6.1f} s  ({phases})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
