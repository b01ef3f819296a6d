"""False positives and off-by-one detection of the identity gates on real trained models.

For each real fixture (SmolLM2-135M, and the held-out Gemma-3-270M), every corpus item is run
through the float32 reference and through a bfloat16 forward (bf16 weights and operands, fp32
GEMM accumulation: what a GPU server computes; ``fixtures_real.emulate_half_gemm``). Examples are
windows of those sequences (lengths 1..64, several per item, at least ``--examples`` in all). For
each example and every depth k = 1..L and F, the project's own gate (:func:`eagle3_conformance.checks.judge`,
the function ``slot_identity``/``verifier_identity`` call) judges

- the correct slot (B_k as computed in float32 then stored as bf16, or as computed in bf16):
  must pass or be undecidable, a fail is a false positive;
- the off-by-one slot (B_{k+1} declared as B_k): must fail, an undecidable or pass is reported per
  depth;

and the per-row floor of ``row_fingerprint`` is applied to every resolvable row of the correct
slot. Printed: counts, the smallest separation (angle between the declared boundary and the
runner-up, for passing correct slots), the worst per-sample noise angle, the worst row cosine.

``--whole``: one example per corpus item, the whole item (docs/gates.md, "Whole samples").

Usage: python benchmarks/bench_identity_gates.py [--fixtures smollm2-135m heldout-gemma3-270m]
       [--examples 1000] [--max-len 64] [--whole]
"""

from __future__ import annotations

import argparse
import math
import random
import time

from eagle3_conformance.environment import torch_env

torch_env.prepare()
import torch  # noqa: E402


def _contract(name: str, dtype: str):
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.testbed.fixtures import REPO_ROOT

    for p in (REPO_ROOT / "contracts" / f"{name}.yaml", REPO_ROOT / "contracts" / "heldout" / f"{name}.yaml"):
        if p.is_file():
            c = load_contract(p)
            return c.model_copy(update={"target": c.target.model_copy(update={"dtype": dtype})})
    raise SystemExit(f"no contract for {name}")


def run(name: str, n_examples: int, max_len: int, seed: int = 0, whole: bool = False) -> None:
    from eagle3_conformance.checks import judge
    from eagle3_conformance.core import gates
    from eagle3_conformance.core.notation import all_boundaries
    from eagle3_conformance.reference import Reference, ReferenceModel
    from eagle3_conformance.testbed.fixtures import build_fixture, fixture_spec
    from eagle3_conformance.testbed.fixtures_real import corpus_samples, emulate_half_gemm, load_tokenizer, resolve_spec

    built = build_fixture(name + "-bf16")
    spec = resolve_spec(*fixture_spec(name))
    spec["data"]["num_samples"] = None
    seqs = [list(s.input_ids) for s in corpus_samples(spec, load_tokenizer(built.target_dir)) if len(s.input_ids) >= 2]
    ref32 = ReferenceModel(built.target_dir)
    bf = ReferenceModel(built.target_dir)
    bf.model.to(torch.bfloat16)
    emulate_half_gemm(bf.model)
    rng = random.Random(seed)
    per_item = 1 if whole else max(1, math.ceil(n_examples / len(seqs)))
    t0 = time.time()
    stats = {m: dict(n=0, passed=0, undecidable=0, fp=0, det=0, und_wrong=0, missed=0, sep=9.0, noise=0.0,
                     row_min=1.0, rows=0, row_fp=0, excluded=0) for m in ("float32", "bfloat16")}
    depth_det = {m: {} for m in stats}
    for ids in seqs:
        r32 = ref32.capture(ids)
        s16 = bf.capture(ids).stack
        ref32._cache.clear()
        bf._cache.clear()
        L = r32.num_layers
        names = all_boundaries(L)
        for _ in range(per_item):
            n = len(ids) if whole else rng.randint(1, min(max_len, len(ids)))
            a = 0 if whole else rng.randint(0, len(ids) - n)
            rows = torch.arange(a, a + n)
            keep = rows != 0  # exclude_positions [0]
            if not bool(keep.any()):
                continue
            for mode, stack in (("float32", r32.stack.bfloat16().float()), ("bfloat16", s16)):
                c = _contract(name, mode)
                st = stats[mode]
                ref = Reference(token_ids=r32.token_ids, stack=r32.stack, final_norm_weight=r32.final_norm_weight,
                                final_norm_eps=r32.final_norm_eps, final_norm_kind=r32.final_norm_kind, num_layers=L)
                for k in range(1, L + 2):
                    b = names[k]
                    v = judge(b, stack[k][rows], rows, ref, keep, c)
                    st["n"] += 1
                    if v is None:
                        st["undecidable"] += 1
                    else:
                        st["excluded"] += v.excluded
                        if v.status == "pass":
                            st["passed"] += 1
                            st["sep"] = min(st["sep"], gates.angle_deg(v.runner_cos) - gates.angle_deg(v.declared_cos))
                            st["noise"] = max(st["noise"], gates.angle_deg(v.declared_cos))
                        elif v.status == "undecidable":
                            st["undecidable"] += 1
                        else:
                            st["fp"] += 1
                    if k < L:  # off by one: B_{k+1} where B_k is declared
                        w = judge(b, stack[k + 1][rows], rows, ref, keep, c)
                        d = depth_det[mode].setdefault(k, [0, 0])
                        d[1] += 1
                        if w is not None and w.status == "fail":
                            st["det"] += 1
                            d[0] += 1
                        elif w is not None and w.status == "pass":
                            st["missed"] += 1
                        else:
                            st["und_wrong"] += 1
                    cos = torch.nn.functional.cosine_similarity(stack[k][rows][keep], ref.stack[k][rows][keep], dim=-1)
                    st["rows"] += int(cos.numel())
                    st["row_min"] = min(st["row_min"], float(cos.min()))
                    st["row_fp"] += int((cos < gates.row_min_cosine(c)).sum())
    shape = "the whole item" if whole else f"{per_item} windows each (lengths 1..{max_len})"
    print(f"\n{name}: {len(seqs)} corpus items, {shape}, {time.time() - t0:.0f} s")
    for mode, st in stats.items():
        ex = st["n"] // (L + 1)
        print(f"  {mode:8s} examples {ex}, slot judgements {st['n']}: false positives {st['fp']}, "
              f"undecidable {st['undecidable']}, tokens excluded as unresolvable {st['excluded']}; "
              f"smallest separation {st['sep']:.2f} deg; worst per-sample noise {st['noise']:.2f} deg "
              f"(allowance {gates.IDENTITY_NOISE_DEG[mode]}); rows {st['rows']}, worst row cos {st['row_min']:.4f} "
              f"(floor {gates.ROW_MIN_COSINE[mode]}), rows under the floor {st['row_fp']}")
        print(f"           off-by-one: caught {st['det']}, undecidable {st['und_wrong']}, passed {st['missed']}; "
              "caught rate by depth k: " + " ".join(f"{k}:{a / b:.2f}" for k, (a, b) in sorted(depth_det[mode].items())))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", nargs="+", default=["smollm2-135m", "heldout-gemma3-270m"])
    ap.add_argument("--examples", type=int, default=1000)
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--whole", action="store_true", help="one example per corpus item: the whole item")
    a = ap.parse_args()
    torch.set_num_threads(1)
    for f in a.fixtures:
        run(f, a.examples, a.max_len, whole=a.whole)


if __name__ == "__main__":
    main()
