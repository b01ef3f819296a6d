"""What SGLang's model classes need around them on a CPU, in one process: the process itself
(gloo distributed groups, the published ``ServerArgs`` and runtime context; REFERENCE.md
section 4), a stand-in attention backend with its pools (SGLang's kernels are CUDA-only), and a
shim for CUDA housekeeping calls. The harness (:mod:`.harness`) builds on these."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from eagle3_conformance.environment.ports import free_port  # noqa: F401 (re-exported)
from eagle3_conformance.environment.torch_env import prepare

prepare()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def sglang_version() -> str:
    import sglang

    return str(getattr(sglang, "__version__", "unknown"))


# --------------------------------------------------------------------------------------------
# Attention stand-in
# --------------------------------------------------------------------------------------------


class NoopPool:
    """No-op req-to-token pool (the stand-in attention keeps its own per-request cache)."""

    def __getattr__(self, name: str) -> Any:  # any pool method becomes a no-op
        return lambda *a, **k: None


class LatentRecordingPool(NoopPool):
    """KV pool stand-in: records MLA latent writes, ignores everything else.

    On CPU, DeepSeek's MHA prefill writes the latent ``[T, 1, kv_lora_rank + rope]`` with
    ``get_token_to_kv_pool().set_kv_buffer(self.attn_mha, loc, latent_cache, None)``
    (``models/deepseek_common/attention_forward_methods/forward_mha.py:596-627, CPU branch``) and calls
    attention with ``save_kv_cache=False``. A later MLA-form verify must attend to that latent,
    so while the backend is storing we keep it per (layer_id, request).
    """

    def __init__(self, backend: "StandInAttention") -> None:
        self._backend = backend

    def set_kv_buffer(self, layer, loc, cache_k, cache_v, *args, **kwargs):
        b = self._backend
        if not b.store or cache_v is not None:
            return None
        start = 0
        for key, n in b.segments:
            ck = (layer.layer_id, key)
            new = cache_k[start:start + n].detach().clone()
            b.latent[ck] = torch.cat([b.latent[ck], new]) if ck in b.latent else new
            start += n
        return None


class StandInAttention:
    """Attention backend stand-in: causal SDPA per request, with an optional per-request cache.

    SGLang's ``RadixAttention.forward`` (``srt/layers/radix_attention.py:114-185``) calls
    ``get_attn_backend().forward(q, k, v, layer, forward_batch, save_kv_cache, **kw)``. We receive
    q ``[N, Hq*Dqk]``, k ``[N, Hk*Dqk]``, v ``[N, Hv*Dv]`` (k/v may already be 3-D) and return
    ``[N, Hq*Dv]`` in q's dtype. ``layer.scaling`` is the softmax scale.

    The harness sets :attr:`segments` before each forward: one ``(req_key, n_new)`` per request
    in batch order. With :attr:`store` the new K/V of each request is appended to
    ``cache[(layer_id, req_key)]``; with :attr:`attend_cache` the new queries attend to that
    cached prefix in full, and causally among themselves. That is what a TARGET_VERIFY chain
    (topk 1: the tree mask is causal) sees in SGLang. Sliding windows and logit caps are not
    modelled (the tiny test models have none).

    For MLA (DeepSeek), ``prefill/decode_attention_backend_str = "triton"`` selects the
    plain-MHA prefill path for EXTEND and the MLA path (q/k = ``[nope|rope]`` latent, v = latent,
    one kv head) for verify/draft-extend (``models/deepseek_common/attention_backend_handler.py:
    233-252``, ``attention_forward_methods/forward_mla.py:783-799``); both arrive here as plain
    q/k/v with the layer's head counts and dims.
    """

    prefill_attention_backend_str = "triton"
    decode_attention_backend_str = "triton"

    def __init__(self) -> None:
        self.token_to_kv_pool = LatentRecordingPool(self)
        self.req_to_token_pool = NoopPool()
        self.latent: dict[tuple[int, Any], torch.Tensor] = {}
        self.segments: list[tuple[Any, int]] = []
        self.store = False
        self.attend_cache = False
        self.cache: dict[tuple[int, Any], tuple[torch.Tensor, torch.Tensor]] = {}
        self.calls = 0

    def init_forward_metadata(self, forward_batch) -> None:  # SGLang API; nothing to plan
        return None

    def forward(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        self.calls += 1
        if kwargs.get("q_rope") is not None:
            q = torch.cat([q.reshape(q.shape[0], layer.tp_q_head_num, -1),
                           kwargs["q_rope"].reshape(q.shape[0], layer.tp_q_head_num, -1)], -1)
        if kwargs.get("k_rope") is not None:
            k = torch.cat([k.reshape(k.shape[0], layer.tp_k_head_num, -1),
                           kwargs["k_rope"].reshape(k.shape[0], layer.tp_k_head_num, -1)], -1)
        hq, hk, hv = layer.tp_q_head_num, layer.tp_k_head_num, layer.tp_v_head_num
        q = q.reshape(q.shape[0], hq, -1)
        k = k.reshape(k.shape[0], hk, -1)
        v = v.reshape(v.shape[0], hv, -1)[..., : layer.v_head_dim]
        out = q.new_empty(q.shape[0], hq, layer.v_head_dim)
        segments = self.segments or [(None, q.shape[0])]
        assert sum(n for _, n in segments) == q.shape[0], (segments, q.shape)
        start = 0
        for key, n in segments:
            qs, ks, vs = q[start:start + n], k[start:start + n], v[start:start + n]
            ck = (layer.layer_id, key)
            lat = self.latent.get(ck)
            if self.attend_cache and lat is not None and hk == 1 and ks.shape[-1] == lat.shape[-1]:
                # MLA absorbed form (k = [latent|k_pe], v = latent) over an MHA-prefilled prefix
                kk = torch.cat([lat.to(ks.dtype), ks])
                vv = torch.cat([lat[..., : vs.shape[-1]].to(vs.dtype), vs])
            elif self.attend_cache and ck in self.cache:
                pk, pv = self.cache[ck]
                kk, vv = torch.cat([pk, ks]), torch.cat([pv, vs])
            else:
                kk, vv = ks, vs
            if self.store and save_kv_cache:
                self.cache[ck] = (kk.detach(), vv.detach())
            p = kk.shape[0] - n  # cached prefix length
            mask = torch.ones(n, kk.shape[0], dtype=torch.bool, device=q.device).tril(diagonal=p)
            qh = qs.transpose(0, 1).float()
            kh = kk.transpose(0, 1).float().repeat_interleave(hq // hk, dim=0)
            vh = vv.transpose(0, 1).float().repeat_interleave(hq // hv, dim=0)
            o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, scale=layer.scaling)
            out[start:start + n] = o.transpose(0, 1).to(out.dtype)
            start += n
        return out.reshape(q.shape[0], hq * layer.v_head_dim)


@contextlib.contextmanager
def cuda_sync_noop():
    """CPU shim: ``kimi_k25_eagle3.py:404-416`` ``set_embed`` calls ``torch.cuda.empty_cache()``
    and ``torch.cuda.synchronize()`` unconditionally after swapping the weight; on a CPU torch the
    latter raises. Both are device housekeeping with no effect on values."""
    if torch.cuda.is_available():
        yield
        return
    saved = torch.cuda.synchronize, torch.cuda.empty_cache
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.empty_cache = lambda *a, **k: None
    try:
        yield
    finally:
        torch.cuda.synchronize, torch.cuda.empty_cache = saved


# --------------------------------------------------------------------------------------------
# Process setup (REFERENCE.md section 4; SGLang test/layer_ut_utils.py:13-35)
# --------------------------------------------------------------------------------------------


def init_process(server_args_fields: dict, release: Any) -> Any:
    """init_single_process_dist-style setup; returns the published ``ServerArgs``.

    ``release`` is the installed SGLang's harness branch
    (:func:`eagle3_conformance.tools.sglang_cpu.releases.branch`): it publishes the ``ServerArgs``
    the way that release does.

    Mirrors ``sglang/test/layer_ut_utils.py:13-35`` and ``sglang/test/test_utils.py:2101-2124``
    (``publish_build_topology``), which we do not import (``sglang.test.test_utils`` pulls in
    ``datasets``).
    """
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    for k, v in dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0").items():
        os.environ[k] = v
    from sglang.srt.distributed.parallel_state import (
        init_distributed_environment,
        initialize_model_parallel,
        model_parallel_is_initialized,
    )
    from sglang.srt.server_args import ServerArgs

    if not torch.distributed.is_initialized():
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo")
    server_args = ServerArgs(**server_args_fields)
    release.publish_server_args(server_args)
    if not model_parallel_is_initialized():
        initialize_model_parallel(backend="gloo")
    # RotaryEmbedding imports vllm._custom_ops unless _is_cpu (rotary_embedding/base.py:122-139).
    from sglang.srt.layers.rotary_embedding import base as rope_base

    rope_base._is_cpu = True
    return server_args


def teardown_process(release: Any) -> None:
    """Tear down what :func:`init_process` set up (``release``: the same harness branch)."""
    from sglang.srt.distributed.parallel_state import (
        destroy_distributed_environment,
        destroy_model_parallel,
    )

    try:
        destroy_model_parallel()
    finally:
        destroy_distributed_environment()
        release.reset()
