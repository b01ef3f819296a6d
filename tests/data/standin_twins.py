"""Run each sgl_kernel stand-in op and its Triton twin in SGLang 0.5.23 on the same random inputs,
under TRITON_INTERPRET=1 (set by the caller before this process starts: Triton reads it at import).
Prints one JSON line: {op: {"cases": n, "mismatches": [...]}}. Used by tests/test_sglang_engine.py.
"""

import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
assert os.environ.get("SGLANG_USE_CPU_ENGINE") != "1", "the twins run on SGLang's generic (Triton) path"

from eagle3_conformance.environment import torch_env  # noqa: E402

torch_env.prepare()
import torch  # noqa: E402

from eagle3_conformance.tools.sglang_engine import sgl_kernel_standin as S  # noqa: E402

SEEDS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
P2 = lambda n: 1 << max(0, (n - 1).bit_length())  # noqa: E731  (SGLang's next_power_of_2)


def _slots(g, bs, pool=8, pool_len=64):
    rpi = torch.randperm(pool, generator=g)[:bs].to(torch.int64)
    r2t = torch.randint(0, 5000, (pool, pool_len), generator=g, dtype=torch.int32)
    start = torch.randint(0, 12, (bs,), generator=g, dtype=torch.int64)
    end = start + torch.randint(0, 40, (bs,), generator=g, dtype=torch.int64)
    return rpi, r2t, start, end, pool_len


def case_req_to_token(g):
    from sglang.srt.mem_cache.allocation import assign_req_to_token_pool
    bs = int(torch.randint(1, 6, (1,), generator=g))
    rpi, r2t, start, end, pl = _slots(g, bs)
    out = torch.randint(0, 5000, (int((end - start).sum()),), generator=g, dtype=torch.int64)
    a, b = r2t.clone(), r2t.clone()
    S.assign_req_to_token_pool_cpu(rpi, a, start, end, out, pl)
    assign_req_to_token_pool[(bs,)](rpi, b, start, end, out, pl, P2(bs))
    return torch.equal(a, b)


def case_extend_locs(g):
    from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs
    bs = int(torch.randint(1, 6, (1,), generator=g))
    rpi, r2t, start, end, pl = _slots(g, bs)
    n = int((end - start).sum())
    a, b = torch.full((n,), -7, dtype=torch.int64), torch.full((n,), -7, dtype=torch.int64)
    S.assign_extend_cache_locs_cpu(rpi, r2t, start, end, a, pl)
    assign_extend_cache_locs[(bs,)](rpi, r2t, start, end, b, pl, P2(bs))
    return torch.equal(a, b)


def case_draft_locs(g):
    from sglang.kernels.ops.speculative.cache_locs import assign_draft_cache_locs_contiguous
    bs = int(torch.randint(1, 6, (1,), generator=g))
    topk, steps = int(torch.randint(1, 4, (1,), generator=g)), int(torch.randint(1, 5, (1,), generator=g))
    rpi, r2t, start, _, pl = _slots(g, bs)
    a = torch.full((bs * topk * steps,), -7, dtype=torch.int64)
    b = a.clone()
    S.assign_draft_cache_locs_contiguous_cpu(rpi, r2t, start, a, pl, topk, steps)
    assign_draft_cache_locs_contiguous[(bs,)](rpi, r2t, start, b, pl, topk, steps, BS=bs)
    return torch.equal(a, b)


def case_bonus(g):
    from sglang.kernels.ops.speculative.eagle import fill_bonus_tokens
    bs, stride = int(torch.randint(1, 6, (1,), generator=g)), int(torch.randint(1, 6, (1,), generator=g))
    toks = torch.randint(0, 50000, (bs, stride), generator=g, dtype=torch.int64)
    lens = torch.randint(1, stride + 1, (bs,), generator=g, dtype=torch.int32)
    a, b = torch.full((bs,), -1, dtype=torch.int64), torch.full((bs,), -1, dtype=torch.int64)
    S.fill_bonus_tokens_cpu(toks, lens, a, stride)
    fill_bonus_tokens[(bs,)](toks, lens, b, stride)
    return torch.equal(a, b)


def _tree_inputs(g):
    bs = int(torch.randint(1, 4, (1,), generator=g))
    topk = int(torch.randint(1, 4, (1,), generator=g))
    depth = int(torch.randint(1, 5, (1,), generator=g))
    plen = (depth - 1) * topk + 1
    hi = topk * plen  # selected // topk must index parent_list (the twin would read out of bounds)
    n = int(torch.randint(2, min(hi, 7) + 2, (1,), generator=g))
    sel = torch.stack([torch.randperm(hi, generator=g)[:n - 1].sort().values for _ in range(bs)]).to(torch.int64)
    parents = torch.randint(-1, hi, (bs, plen), generator=g, dtype=torch.int64)
    seq = torch.randint(1, 20, (bs,), generator=g, dtype=torch.int64)
    mode = int(torch.randint(0, 2, (1,), generator=g))
    return bs, topk, depth, n, sel, parents, seq, mode


def _tree_outputs(bs, n, seq, mode):
    size = int(((seq + n) * n).sum()) if mode == 0 else bs * n * n
    return [torch.ones(size, dtype=torch.bool), torch.zeros(bs * n, dtype=torch.int64),
            torch.zeros(bs, n, dtype=torch.int64), torch.full((bs, n), -1, dtype=torch.int64),
            torch.full((bs, n), -1, dtype=torch.int64)]


def case_tree(g, want_outputs=False):
    from sglang.kernels.ops.speculative.spec_tree import TreeMaskMode, sgl_build_tree_kernel_triton
    bs, topk, depth, n, sel, parents, seq, mode = _tree_inputs(g)
    a, b = _tree_outputs(bs, n, seq, mode), _tree_outputs(bs, n, seq, mode)
    S.build_tree_kernel_efficient_cpu(parents, sel, seq, *a, topk, depth, n, mode)
    sgl_build_tree_kernel_triton(parents, sel, seq, *b, topk, depth, n, TreeMaskMode(mode))
    ok = all(torch.equal(x, y) for x, y in zip(a, b))
    return (ok, bs, n, a) if want_outputs else ok


def case_verify(g):
    from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_triton
    ok, bs, n, (_, _, ri, nt, ns) = case_tree(g, want_outputs=True)
    steps = int(torch.randint(1, n + 1, (1,), generator=g))
    cand = torch.randint(0, 3, (bs, n), generator=g, dtype=torch.int64)
    target = torch.randint(0, 3, (bs, n), generator=g, dtype=torch.int64)
    outs = []
    for fn in ("cpu", "triton"):
        pred = torch.full((bs * n,), -1, dtype=torch.int64)
        acc = torch.full((bs, steps), -1, dtype=torch.int64)
        num = torch.zeros(bs, dtype=torch.int64)
        if fn == "cpu":
            S.verify_tree_greedy_cpu(predicts=pred, accept_index=acc, accept_token_num=num, candidates=cand,
                                     retrive_index=ri, retrive_next_token=nt, retrive_next_sibling=ns,
                                     target_predict=target)
        else:
            verify_tree_greedy_triton(pred, acc, num, cand, ri, nt, ns, target)
        outs.append((pred, acc, num))
    return ok and all(torch.equal(x, y) for x, y in zip(*outs))


def case_copy_kv(g):
    from sglang.kernels.ops.kvcache.cache_move import copy_all_layer_kv_cache_tiled
    layers, rows, width = 3, 16, int(torch.randint(1, 9, (1,), generator=g)) * 4
    k = int(torch.randint(1, 6, (1,), generator=g))
    perm = torch.randperm(rows, generator=g)
    src, tgt = perm[:k].to(torch.int64), perm[k:2 * k].to(torch.int64)
    bufs_a = [torch.randn(rows, width, generator=g) for _ in range(layers)]
    bufs_b = [x.clone() for x in bufs_a]
    for bufs, fn in ((bufs_a, "cpu"), (bufs_b, "triton")):
        ptrs = torch.tensor([x.data_ptr() for x in bufs], dtype=torch.uint64 if fn == "triton" else torch.int64)
        strides = torch.tensor([x.stride(0) * x.element_size() for x in bufs], dtype=torch.int64)
        if fn == "cpu":
            S.copy_all_layer_kv_cache_cpu(ptrs, strides, tgt, src)
        else:
            copy_all_layer_kv_cache_tiled[(layers, 1)](ptrs, strides, tgt, src, k, P2(k), BYTES_PER_TILE=P2(width * 4))
    return all(torch.equal(x, y) for x, y in zip(bufs_a, bufs_b))


CASES = {"assign_req_to_token_pool_cpu": case_req_to_token, "assign_extend_cache_locs_cpu": case_extend_locs,
         "assign_draft_cache_locs_contiguous_cpu": case_draft_locs, "fill_bonus_tokens_cpu": case_bonus,
         "build_tree_kernel_efficient_cpu": case_tree, "verify_tree_greedy_cpu": case_verify,
         "copy_all_layer_kv_cache_cpu": case_copy_kv}

if __name__ == "__main__":
    out = {}
    for name, fn in CASES.items():
        bad, errors = [], []
        for seed in range(SEEDS):
            g = torch.Generator().manual_seed(seed)
            try:
                if not fn(g):
                    bad.append(seed)
            except Exception as e:  # noqa: BLE001 - reported per op
                errors.append(f"seed {seed}: {type(e).__name__}: {e}"[:300])
        out[name] = {"cases": SEEDS, "mismatches": bad, "errors": errors[:3]}
    # the comparison must be able to fail: an off-by-one port (the last accepted slot read one too far)
    right = S.fill_bonus_tokens_cpu
    S.fill_bonus_tokens_cpu = lambda toks, lens, out, stride: right(toks, (lens + 1).clamp(max=stride), out, stride)
    out["broken fill_bonus_tokens_cpu"] = {"cases": SEEDS, "mismatches": [
        s for s in range(SEEDS) if not case_bonus(torch.Generator().manual_seed(s))], "errors": []}
    S.fill_bonus_tokens_cpu = right
    print(json.dumps(out))
