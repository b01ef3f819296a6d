"""The suite's CPU savings of issue 42 item 4, measured side by side on the real pair (SmolLM2-135M):

- ``greedy``: the engine paths' losslessness oracle (:func:`eagle3_conformance.reference.greedy.target_greedy`,
  the sglang-engine path's 4 prompts x 32 new tokens, float32): a fresh decode (the target loaded, one
  forward per token) against the same decode read back from its disk cache (a temporary model cache root);
  the two must be equal;
- ``profiles``: every check on the real pair's stored samples (:func:`eagle3_conformance.checks.run_checks`)
  with the cosine profiles computed each time they are asked for (the code before the memo) and with the
  memo (:func:`eagle3_conformance.checks.identity.similarity_profile`); the findings must be equal.

- ``accept``: the cpu-accept path's loop (:func:`eagle3_conformance.tools.sglang_cpu.spec_loop.speculative_decode`,
  8 held-out prompts x 32 new tokens, k = 3, float32, the shipped trained draft) one prompt at a time (the code
  before) and with the prompts' target verifies and draft extends after verify batched, alternating; every
  prompt's outputs and accept lengths, the histogram and the mean accept length must be equal.

    PYTHONPATH=. python benchmarks/bench_suite_cpu.py greedy
    PYTHONPATH=. python benchmarks/bench_suite_cpu.py profiles [--samples 12]
    PYTHONPATH=. python benchmarks/bench_suite_cpu.py accept [--rounds 2]

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


def accept(rounds: int) -> bool:
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    import torch

    from eagle3_conformance.paths import cpu_accept
    from eagle3_conformance.testbed.trained_draft import TRAINED, ensure_trained_draft, eval_prompts
    from eagle3_conformance.tools.sglang_cpu import SGLangCPUHarness, row_blocks
    from eagle3_conformance.tools.sglang_cpu.spec_loop import speculative_decode

    td = ensure_trained_draft(TRAINED["smollm2-135m"])
    prompts = eval_prompts(td.target_dir, cpu_accept.DEFAULT_PROMPTS, cpu_accept.PROMPT_TOKENS)
    h = SGLangCPUHarness(td.target_dir, td.draft_dir, dtype=torch.float32)
    probe = row_blocks.rows_invariant
    try:
        t0 = _cpu()
        batches = probe([h.target, h.draft], cpu_accept.NUM_DRAFT_TOKENS + 1, len(prompts))
        first = _cpu() - t0  # the probe's first call in a process (then remembered per shape)
        times: dict[str, list[float]] = {"one prompt at a time": [], "batched": []}
        seen = []
        for _ in range(rounds):
            for name in times:
                row_blocks.rows_invariant = probe if name == "batched" else (lambda *a: False)
                t0 = _cpu()
                res = speculative_decode(h, prompts, num_draft_tokens=cpu_accept.NUM_DRAFT_TOKENS,
                                         max_new_tokens=cpu_accept.DEFAULT_TOKENS)
                times[name].append(_cpu() - t0)
                seen.append(([r.output for r in res.runs], [r.accept_lengths for r in res.runs],
                             res.correct_drafts_histogram, res.mean_accept_length, res.errors))
    finally:
        row_blocks.rows_invariant = probe
        h.close()
    same = all(s == seen[0] for s in seen)
    alone, batched = (min(v) for v in times.values())
    print(f"cpu-accept loop, {len(prompts)} prompts x {cpu_accept.DEFAULT_TOKENS} new tokens, k = "
          f"{cpu_accept.NUM_DRAFT_TOKENS} (float32, the trained draft): one prompt at a time "
          f"{' / '.join(f'{t:.1f}' for t in times['one prompt at a time'])} s CPU, batched "
          f"{' / '.join(f'{t:.1f}' for t in times['batched'])} s CPU (ratio {batched / alone:.2f}; the row-block probe "
          f"{first:.2f} s CPU once per process, batching: {batches}); mean accept length {seen[0][3]!r}, histogram "
          f"{seen[0][2]}; every prompt's outputs and accept lengths equal: {same}")
    return same


def _fresh(ref):
    """``ref`` without the profile memo, keeping its cached unit rows and neighbour cosines."""
    new = replace(ref)
    new.__dict__.update({k: v for k, v in ref.__dict__.items() if k in ("unit", "neighbour_cosine")})
    return new


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("greedy", "profiles", "accept"))
    p.add_argument("--samples", type=int, default=12)
    p.add_argument("--rounds", type=int, default=2, help="accept: rounds of (one at a time, batched)")
    a = p.parse_args(argv)
    ok = greedy() if a.what == "greedy" else profiles(a.samples) if a.what == "profiles" else accept(a.rounds)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
