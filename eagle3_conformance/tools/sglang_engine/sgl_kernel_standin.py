"""Internal: a CPU stand-in, no stable API (docs/architecture.md, "The self-test wall").

A stand-in ``sgl_kernel`` module for SGLang 0.5.23's CPU engine with the torch_native backend.

Why it exists: with ``SGLANG_USE_CPU_ENGINE=1`` SGLang imports ``sgl_kernel`` (the CPU build of
sgl-kernel) at module level, and PyPI has no CPU wheel of it. On the torch_native path (config B
of docs/REFERENCE.md section 4.1) it calls exactly seven bookkeeping ops, for KV slots,
the draft tree and greedy verify; model math and attention are SGLang's own torch code. Each op
here is a port of its Triton twin in the same SGLang file (named per op), written for 0.5.23 and
guarded: :data:`GUARDS` hashes the call site and the twin (``guards.check_all``), and
tests/test_sglang_engine_standins.py runs each op against the twin under ``TRITON_INTERPRET=1``.

Any other name is resolvable (SGLang takes ~200 ``torch.ops.sgl_kernel.X`` references at import
time) but raises :class:`StandInMissing` when called: never a silent no-op. Names SGLang probes
with ``hasattr`` to pick a code path (AMX packing, quantized kernels) answer False, so SGLang takes
its own ``forward_native`` math (``sglang/srt/utils/common.py:354-372``).
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import sys
import types

import torch

MODULE_OPS = (
    "copy_all_layer_kv_cache_cpu", "assign_req_to_token_pool_cpu", "assign_extend_cache_locs_cpu",
    "assign_draft_cache_locs_contiguous_cpu", "fill_bonus_tokens_cpu", "build_tree_kernel_efficient_cpu",
    "verify_tree_greedy_cpu",
)
"""The seven ops config B calls (docs/REFERENCE.md section 4.1, configuration B)."""

PROBED_ABSENT = frozenset({
    "convert_weight_packed", "gptq_marlin_repack", "awq_marlin_repack", "fp8_scaled_mm", "int8_scaled_mm",
    "scaled_fp4_quant", "sgl_per_token_group_quant_8bit_v2", "fused_scale_residual_norm_scale_shift",
    "fused_qk_norm_rope_cpu", "fused_qk_norm_cpu", "get_device_accessible_ptr", "shm_group_initialize",
    "gdn_attention",
})
"""Names SGLang 0.5.23 tests with ``hasattr(torch.ops.sgl_kernel, X)`` or ``register_fake_if_exists``
(grep of the wheel): absent here, so SGLang registers no fake kernel and takes its torch code."""

GUARDS: dict[tuple[str, str], str] = {
    # op call sites (the positional signature each op must accept)
    ("sglang.kernels.ops.kvcache.cache_move", "copy_all_layer_kv_cache_func"): "d9fbb4b3a29b2b9d",
    ("sglang.srt.mem_cache.allocation", "assign_req_to_token_pool_func"): "598fab3dd718a36d",
    ("sglang.kernels.ops.speculative.cache_locs", "assign_extend_cache_locs_func"): "3e1426eb94697423",
    ("sglang.kernels.ops.speculative.cache_locs", "fill_front_out_cache_loc_func"): "6158d6e69f1d9406",
    ("sglang.kernels.ops.speculative.cache_locs", "assign_draft_cache_locs_contiguous_func"): "fac31ce1dfba5bb3",
    ("sglang.kernels.ops.speculative.eagle", "fill_bonus_tokens_func"): "2d7129dfa09e2b02",
    ("sglang.kernels.ops.speculative.spec_tree", "build_tree_kernel_efficient_func"): "d439d875b62331d3",
    ("sglang.kernels.ops.speculative.spec_tree", "verify_tree_greedy_func"): "49f6791e00c6e8ba",
    # the Triton twins the ports follow
    ("sglang.kernels.ops.kvcache.cache_move", "copy_all_layer_kv_cache_tiled"): "646e39345faaecce",
    ("sglang.srt.mem_cache.allocation", "assign_req_to_token_pool"): "437b3f4a5d1f57d6",
    ("sglang.kernels.ops.speculative.cache_locs", "assign_extend_cache_locs"): "f5f5fde7d6b809a7",
    ("sglang.kernels.ops.speculative.cache_locs", "assign_draft_cache_locs_contiguous"): "5e50ac5e7115d5ab",
    ("sglang.kernels.ops.speculative.eagle", "fill_bonus_tokens"): "de60ae5fe1643d16",
    ("sglang.kernels.ops.speculative.spec_tree", "sgl_build_tree_kernel_efficient_triton"): "ec421f304b5599c4",
    ("sglang.kernels.ops.speculative.spec_tree", "verify_tree_greedy_kernel_triton"): "72da048c93932461",
}
"""(SGLang module, function) -> source digest (:func:`guards.source_digest` on 0.5.23 when ported)."""


class StandInMissing(NotImplementedError):
    """SGLang called an ``sgl_kernel`` op this stand-in does not implement."""


def _missing(name: str):
    def op(*args, **kwargs):
        raise StandInMissing(
            f"sgl_kernel.{name}: SGLang called an op the CPU-engine stand-in does not implement (only the "
            f"7 bookkeeping ops of config B: {', '.join(MODULE_OPS)}); eagle3_conformance/tools/sglang_engine/"
            "sgl_kernel_standin.py")
    op.__name__ = name
    return op


# --- KV / slots -----------------------------------------------------------------------------


def copy_all_layer_kv_cache_cpu(data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor,
                                src_loc: torch.Tensor) -> None:
    """Copy row ``src_loc[i]`` to row ``tgt_loc[i]`` in every buffer (``data_ptrs[b]``: base address,
    ``strides[b]``: row bytes). Twin: ``copy_all_layer_kv_cache_tiled``
    (``sglang/kernels/ops/kvcache/cache_move.py``): all source rows are read before any is written."""
    src, tgt = src_loc.tolist(), tgt_loc.tolist()
    for base, stride in zip(data_ptrs.tolist(), strides.tolist()):
        rows = [ctypes.string_at(base + s * stride, stride) for s in src]
        for t, row in zip(tgt, rows):
            ctypes.memmove(base + t * stride, row, stride)


def _offsets(start: torch.Tensor, end: torch.Tensor) -> list[int]:
    lens = (end.long() - start.long()).tolist()
    out, acc = [], 0
    for n in lens:
        out.append(acc)
        acc += n
    return out


def assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                                 pool_len: int) -> None:
    """``req_to_token[req_pool_indices[i], start[i]:end[i]] = out_cache_loc[o_i : o_i + len_i]``, o_i the
    sum of the earlier lengths. Twin: ``assign_req_to_token_pool`` (``sglang/srt/mem_cache/allocation.py``)."""
    starts, ends = start_offset.tolist(), end_offset.tolist()
    for i, (rp, off) in enumerate(zip(req_pool_indices.tolist(), _offsets(start_offset, end_offset))):
        n = ends[i] - starts[i]
        if n > 0:
            req_to_token[rp, starts[i]:ends[i]] = out_cache_loc[off:off + n].to(req_to_token.dtype)


def assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                                 pool_len: int) -> None:
    """``out_cache_loc[o_i : o_i + len_i] = req_to_token[req_pool_indices[i], start[i]:end[i]]``. Twin:
    ``assign_extend_cache_locs`` (``sglang/kernels/ops/speculative/cache_locs.py``)."""
    starts, ends = start_offset.tolist(), end_offset.tolist()
    for i, (rp, off) in enumerate(zip(req_pool_indices.tolist(), _offsets(start_offset, end_offset))):
        n = ends[i] - starts[i]
        if n > 0:
            out_cache_loc[off:off + n] = req_to_token[rp, starts[i]:ends[i]].to(out_cache_loc.dtype)


def assign_draft_cache_locs_contiguous_cpu(req_pool_indices, req_to_token, seq_lens, out_cache_loc,
                                           pool_len: int, topk: int, num_steps: int) -> None:
    """Request i's ``topk * num_steps`` slots from ``seq_lens[i]`` on, into ``out_cache_loc[i*c : (i+1)*c]``.
    Twin: ``assign_draft_cache_locs_contiguous`` (``cache_locs.py``; positions are not written on CPU)."""
    c = topk * num_steps
    for i, (rp, s) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        out_cache_loc[i * c:(i + 1) * c] = req_to_token[rp, s:s + c].to(out_cache_loc.dtype)


# --- speculative: bonus token, tree, greedy verify -------------------------------------------


def fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus_tokens, accept_stride: int) -> None:
    """``bonus[i] = accept_tokens.flat[accept_stride * i + accept_lens[i] - 1]``. Twin: ``fill_bonus_tokens``
    (``sglang/kernels/ops/speculative/eagle.py``)."""
    flat = accept_tokens.reshape(-1)
    for i, n in enumerate(accept_lens.tolist()):
        bonus_tokens[i] = flat[accept_stride * i + n - 1]


def _find(sel: list[int], value: int, n: int) -> int:
    for pp in range(n):
        if sel[pp] == value:
            return pp
    return -1


def _build_links(b, sel, parents, topk, n, ri, nt, ns) -> None:
    for i in range(n - 1, 0, -1):
        ri[b * n + i] = b * n + i
        ptb = sel[i - 1] // topk
        pos = 0 if ptb == 0 else _find(sel, parents[ptb], n - 1) + 1
        if pos == 0 and ptb != 0:
            continue  # parent not found (the twin's found == 0)
        nxt = nt[b * n + pos]
        nt[b * n + pos] = i
        if nxt != -1:
            ns[b * n + i] = nxt
    ri[b * n] = b * n


def _build_mask(b, sel, parents, topk, depth, n, seq_len, seq_tree_idx, mode, mask, pos_out) -> None:
    for x in range(n):
        t = (seq_tree_idx + (seq_len + n) * x + seq_len + 1) if mode == 0 else (n * n * b + n * x + 1)
        mask[t - 1] = 1
        for i in range(n - 1):
            mask[t + i] = 0
        if x == 0:
            continue
        cur, position = x - 1, 0
        for _ in range(depth):
            position += 1
            mask[t + cur] = 1
            ptb = sel[cur] // topk
            if ptb == 0:
                break
            cp = _find(sel, parents[ptb], n - 1)
            if cp < 0:
                break
            cur = cp
        pos_out[b * n + x] = position + seq_len


def build_tree_kernel_efficient_cpu(parent_list, selected_index, verified_seq_len, tree_mask, positions,
                                    retrieve_index, retrieve_next_token, retrieve_next_sibling, topk: int,
                                    depth: int, draft_token_num: int, tree_mask_mode: int) -> None:
    """EAGLE tree layout for the verify step. A literal port of ``sgl_build_tree_kernel_efficient_triton``
    (``sglang/kernels/ops/speculative/spec_tree.py``), one Python loop per request; writes ``tree_mask``,
    ``positions``, ``retrieve_index``, ``retrieve_next_token``, ``retrieve_next_sibling`` in place."""
    if int(tree_mask_mode) == 2:
        raise StandInMissing("build_tree_kernel_efficient_cpu: QLEN_ONLY_BITPACKING is not ported (nor is it in "
                             "SGLang's Triton twin)")
    n, bs = int(draft_token_num), int(verified_seq_len.shape[0])
    seq = verified_seq_len.tolist()
    mask, pos = tree_mask.reshape(-1).tolist(), positions.reshape(-1).tolist()
    ri, nt = retrieve_index.reshape(-1).tolist(), retrieve_next_token.reshape(-1).tolist()
    ns = retrieve_next_sibling.reshape(-1).tolist()
    parents_all = parent_list.reshape(bs, -1).tolist() if parent_list.numel() else [[0]] * bs
    sel_all = selected_index.reshape(bs, -1).tolist()
    prefix = 0
    for b in range(bs):
        pos[b * n] = seq[b]
        _build_links(b, sel_all[b], parents_all[b], topk, n, ri, nt, ns)
        _build_mask(b, sel_all[b], parents_all[b], topk, depth, n, seq[b], n * n * b + prefix * n,
                    int(tree_mask_mode), mask, pos)
        prefix += seq[b]
    for t, vals in ((tree_mask, mask), (positions, pos), (retrieve_index, ri), (retrieve_next_token, nt),
                    (retrieve_next_sibling, ns)):
        t.view(-1).copy_(torch.tensor(vals, dtype=t.dtype))


def verify_tree_greedy_cpu(*, predicts, accept_index, accept_token_num, candidates, retrive_index,
                           retrive_next_token, retrive_next_sibling, target_predict) -> None:
    """Greedy verification of the draft tree. A literal port of ``verify_tree_greedy_kernel_triton``
    (``spec_tree.py``): follow ``retrive_next_token`` / ``retrive_next_sibling`` from the root, accepting
    the child whose candidate equals the target's prediction at the last accepted node."""
    bs, n = candidates.shape
    m = accept_index.shape[1]
    cand, ri = candidates.reshape(-1).tolist(), retrive_index.reshape(-1).tolist()
    nt, ns = retrive_next_token.reshape(-1).tolist(), retrive_next_sibling.reshape(-1).tolist()
    tp = target_predict.reshape(-1).tolist()
    pred, acc = predicts.view(-1), accept_index.view(-1)
    for bx in range(bs):
        last = ri[bx * n]
        acc[bx * m] = last
        num, cur = 0, 0
        for _ in range(1, m):
            cur = nt[bx * n + cur]
            target = tp[last]
            matched = False
            while cur != -1:
                if cand[bx * n + cur] == target:
                    pred[last] = target
                    num += 1
                    acc[bx * m + num] = ri[bx * n + cur]
                    last = ri[bx * n + cur]
                    matched = True
                    break
                cur = ns[bx * n + cur]
            if not matched:
                break
        accept_token_num[bx] = num
        pred[last] = tp[last]


# --- the module and the torch.ops namespace ---------------------------------------------------


class _OpsNamespace:
    """``torch.ops.sgl_kernel``: the seven ops, False for :data:`PROBED_ABSENT`, a loud stub otherwise."""

    def __getattr__(self, name: str):
        if name.startswith("__") or name in PROBED_ABSENT:
            raise AttributeError(name)
        if name in MODULE_OPS:
            return globals()[name]
        return _missing(name)


def build_module() -> types.ModuleType:
    """The ``sgl_kernel`` module object (not yet in ``sys.modules``)."""
    mod = types.ModuleType("sgl_kernel", __doc__)
    mod.__spec__ = importlib.machinery.ModuleSpec("sgl_kernel", None)
    mod.__file__ = __file__
    for name in MODULE_OPS:
        setattr(mod, name, globals()[name])

    def __getattr__(name: str):
        if name.startswith("__") or name in PROBED_ABSENT:
            raise AttributeError(name)
        return _missing(name)

    vars(mod).update(__getattr__=__getattr__, STANDIN=True)  # module attributes (PEP 562 __getattr__)
    return mod


def install() -> None:
    """Put the stand-in in ``sys.modules['sgl_kernel']`` and on ``torch.ops.sgl_kernel``.

    Raises:
        RuntimeError: a real ``sgl_kernel`` is importable or already imported (the stand-in never
            shadows the real kernels).
    """
    existing = sys.modules.get("sgl_kernel")
    if existing is not None and getattr(existing, "STANDIN", False):
        return
    if existing is not None or importlib.util.find_spec("sgl_kernel") is not None:
        raise RuntimeError("a real sgl_kernel is installed: the CPU-engine stand-in is not installed over it")
    sys.modules["sgl_kernel"] = build_module()
    torch.ops.sgl_kernel = _OpsNamespace()


import importlib.util  # noqa: E402  (used by install)
