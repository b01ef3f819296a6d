"""Internal: a CPU stand-in, no stable API (docs/architecture.md, "The self-test wall").

Process set-up for running vLLM 0.33.0's model classes in-process on a CPU-only machine.

What is real and what stands in (docs/REFERENCE.md section 3.9 and docs/paths.md, ``vllm-cpu``):

* real: vLLM's config classes (``ModelConfig``, ``DeviceConfig``, ``LoadConfig``,
  ``CompilationConfig``, ``VllmConfig``), its distributed groups (``init_distributed_environment``
  with the ``gloo`` backend, ``initialize_model_parallel(1, 1)``), its model classes and layers
  (RMSNorm and rotary embedding run their ``forward_native`` under ``custom_ops=["none"]``), its
  weight iterator and the classes' own ``load_weights``;
* stand-in: the attention layer. ``vllm.model_executor.layers.attention.Attention`` dispatches to
  a backend chosen by the platform (CUDA kernels; ``current_platform`` is
  ``UnspecifiedPlatform`` here), so the module attribute ``Attention`` of the model files is
  replaced by :class:`StandInAttention`, causal ``scaled_dot_product_attention`` per request.
  ``LlamaAttention.forward`` calls ``self.attn(q, k, v)`` (``model_executor/models/llama.py:232``)
  after the real ``qkv_proj`` and rotary embedding, so everything around the kernel is vLLM's.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import torch
from torch import nn

from eagle3_conformance.environment.installed import installed_version
from eagle3_conformance.environment.ports import free_port

# model modules whose ``Attention`` attribute is replaced (each does ``from ... import Attention``)
STANDIN_MODULES = ("vllm.model_executor.models.llama", "vllm.model_executor.models.llama_eagle3")


def vllm_version() -> Optional[str]:
    """The installed vLLM version (package metadata, no import), or None."""
    return installed_version("vllm")


class Segments:
    """The per-request token counts of the current forward (set by the harness before each
    forward; shared by every :class:`StandInAttention` of the process)."""

    lens: list[int] = []


class StandInAttention(nn.Module):
    """Stands in for ``vllm.model_executor.layers.attention.Attention`` (``attention.py:229``).

    Same constructor arguments as the real layer (``num_heads``, ``head_size``, ``scale``,
    ``num_kv_heads``, ...; the rest ignored). ``forward(q, k, v)`` takes q ``[T, Hq*D]`` and
    k, v ``[T, Hk*D]`` (``T`` the batch's tokens, requests back to back as
    :attr:`Segments.lens` says) and returns ``[T, Hq*D]`` in q's dtype: causal attention within
    each request, grouped-query heads repeated, softmax scale ``scale``. No KV cache (every
    request is a prefill from position 0).
    """

    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: Optional[int] = None,
                 *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.num_heads, self.head_size, self.scale = num_heads, head_size, scale
        self.num_kv_heads = num_kv_heads or num_heads

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        T = q.shape[0]
        lens = Segments.lens or [T]
        if sum(lens) != T:
            raise RuntimeError(f"stand-in attention: segments {lens} do not add up to {T} tokens")
        q = q.view(T, self.num_heads, self.head_size)
        k = k.view(T, self.num_kv_heads, self.head_size)
        v = v.view(T, self.num_kv_heads, self.head_size)
        rep = self.num_heads // self.num_kv_heads
        out, start = [], 0
        for n in lens:
            qs = q[start:start + n].transpose(0, 1)
            ks = k[start:start + n].repeat_interleave(rep, 1).transpose(0, 1)
            vs = v[start:start + n].repeat_interleave(rep, 1).transpose(0, 1)
            o = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=self.scale)
            out.append(o.transpose(0, 1).reshape(n, self.num_heads * self.head_size))
            start += n
        return torch.cat(out).to(q.dtype)


_INIT = {"done": False}


def init_process(vllm_config: Any) -> None:
    """Once per process: vLLM's distributed groups over ``gloo`` (world size 1; built under
    ``set_current_vllm_config(vllm_config)``, which ``initialize_model_parallel`` reads,
    ``distributed/parallel_state.py:2118``) and the attention stand-in. Idempotent."""
    if _INIT["done"]:
        return
    import importlib
    import logging

    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    logging.getLogger("vllm").setLevel(logging.ERROR)
    from vllm.config import set_current_vllm_config
    from vllm.distributed.parallel_state import (
        init_distributed_environment,
        initialize_model_parallel,
        model_parallel_is_initialized,
    )

    if not model_parallel_is_initialized():
        with set_current_vllm_config(vllm_config):
            init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                         distributed_init_method=f"tcp://127.0.0.1:{free_port()}")
            initialize_model_parallel(1, 1)
    for name in STANDIN_MODULES:
        mod: Any = importlib.import_module(name)  # a vLLM model module: its Attention is replaced
        mod.Attention = StandInAttention
    _INIT["done"] = True
