"""The suite's two CPU savings of issue 42 item 4, measured side by side on the real pair (SmolLM2-135M):

- ``greedy``: the engine paths' losslessness oracle (:func:`eagle3_conformance.reference.greedy.target_greedy`,
  the sglang-engine path's 4 prompts x 32 new tokens, float32): a fresh decode (the target loaded, one
  forward per token) against the same decode read back from its disk cache (a temporary model cache root);
  the two must be equal;
- ``profiles``: every check on the real pair's stored samples (:func:`eagle3_conformance.checks.run_checks`)
  with the cosine profiles computed each time they are asked for (the code before the memo) and with the
  memo (:func:`eagle3_conformance.checks.identity.similarity_profile`); the findings must be equal.

    PYTHONPATH=. python benchmarks/bench_suite_cpu.py greedy
    PYTHONPATH=. python benchmarks/bench_suite_cpu.py profiles [--samples 12]

Prints CPU seconds (this process's user + system, one torch thread) and exits 1 when a result differs.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def greedy() -> bool:
    from eagle3_conformance.reference import greedy as g
    from eagle3_conformance.testbed.fixtures import build_fixture
    from eagle3_conformance.testbed.trained_draft import eval_prompts

    target = build_fixture("smollm2-135m").target_dir
    prompts = eval_prompts(target, 4, 48)
    with tempfile.TemporaryDirectory() as root:
        os.environ["CONFORMANCE_MODEL_CACHE"] = root
        t0 = _cpu()
        fresh = g.target_greedy(target, prompts, 32, "float32")  # a miss: decoded and stored
        t1 = _cpu()
        cached = g.target_greedy(target, prompts, 32, "float32")
        t2 = _cpu()
    print(f"greedy oracle, 4 prompts x 32 new tokens (float32): fresh decode {t1 - t0:.1f} s CPU (the target's "
          f"load included), read back from the disk cache {t2 - t1:.3f} s CPU; equal: {fresh == cached}")
    return fresh == cached


def profiles(samples: int) -> bool:
    import torch

    from eagle3_conformance.checks import identity, run_checks
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.testbed.fixtures import build_fixture
    from eagle3_conformance.tools.speculators_loader import TrainingLoader

    def direct(slot, rows, ref, keep):  # identity.similarity_profile before the memo
        x = torch.nn.functional.normalize(slot.float()[keep], dim=-1, eps=1e-8)
        return (ref.unit[:, rows[keep]] * x[None]).sum(-1).mean(-1)

    smol = build_fixture("smollm2-135m")
    c = load_contract(REPO / "contracts" / "smollm2-135m.yaml")
    loader = TrainingLoader(smol.data_dir, c.draft.target_hidden_size, c.num_slots, torch.bfloat16)
    idx = [i for i in range(len(loader)) if len(loader.dataset_row(i)["input_ids"]) >= 2][:samples]
    caps = loader.batch(idx)
    model = load_reference_model(smol.target_dir, c.target)
    refs = [model.capture(cap.token_ids) for cap in caps]
    for r in refs:  # the reference's own cached products, computed once outside the timings
        _ = r.unit, r.neighbour_cosine
    memoized = identity.similarity_profile
    for cap, ref in zip(caps, refs):  # warm-up (first-call imports and allocations), untimed
        run_checks(c, cap, _fresh(ref))
    times, out = {}, {}
    for name, fn in (("direct", direct), ("memoized", memoized), ("direct again", direct)):
        identity.similarity_profile = fn
        t0 = _cpu()
        out[name] = [run_checks(c, cap, _fresh(ref)) for cap, ref in zip(caps, refs)]
        times[name] = _cpu() - t0
    identity.similarity_profile = memoized
    same = out["direct"] == out["memoized"] == out["direct again"]
    n = sum(len(f) for f in out["memoized"])
    print(f"run_checks on {len(caps)} stored samples of the real pair ({n} findings): profiles computed each time "
          f"{times['direct']:.2f} s / {times['direct again']:.2f} s CPU, memoized {times['memoized']:.2f} s CPU; "
          f"findings equal: {same}")
    return same


def _fresh(ref):
    """``ref`` without the profile memo, keeping its cached unit rows and neighbour cosines."""
    new = replace(ref)
    new.__dict__.update({k: v for k, v in ref.__dict__.items() if k in ("unit", "neighbour_cosine")})
    return new


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("greedy", "profiles"))
    p.add_argument("--samples", type=int, default=12)
    a = p.parse_args(argv)
    ok = greedy() if a.what == "greedy" else profiles(a.samples)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
