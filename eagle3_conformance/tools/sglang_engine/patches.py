"""Internal: a CPU stand-in, no stable API (docs/architecture.md, "The self-test wall").

The patches config B needs in SGLang 0.5.23 (docs/REFERENCE.md section 4.1, configuration B): two for
EAGLE on torch_native, one for MLA targets (DeepSeek-V2/V3, Kimi-K2.5), one for the MLA EAGLE-3 draft.

Why they exist: SGLang's only CPU EAGLE backend is ``intel_amx`` (AMX Xeons with a source-built
sgl-kernel). With ``attention_backend="torch_native"``:

#9 ``DraftBackendFactory._create_backend`` (``sglang/srt/speculative/draft_utils.py:47``) has no
   torch_native entry: "EAGLE is not supported in decode attention backend torch_native". The patch
   adds one: the draft-extend backend is SGLang's own ``TorchNativeAttnBackend``; the multi-step draft
   decode backend is one ``TorchNativeAttnBackend`` per step whose decode attends over
   ``seq_lens + step + 1`` (a topk-1 chain: the draft slots of step s sit at ``req_to_token[r,
   seq_len + s]``, written by ``assign_draft_cache_locs_contiguous``; as ``IntelAMXMultiStepDraftBackend``,
   ``intel_amx_backend.py:426-497``). topk > 1 raises.
#10 ``TorchNativeAttnBackend.forward_extend`` (``torch_native_backend.py:262``) reads
   ``extend_prefix_lens`` / ``extend_seq_lens``, which a TARGET_VERIFY batch does not carry. For that
   mode the patch derives them from ``spec_info`` as ``IntelAMXAttnBackend._build_extend_metadata``
   does (``intel_amx_backend.py:70-123``): prefix = seq_lens, extend = draft_token_num, seq_lens +=
   draft_token_num, then SGLang's own SDPA code. The causal mask is right for a chain only, so a
   tree (topk > 1) raises.

#11 (MLA targets) DeepSeek's attention dispatch (``models/deepseek_v2.py:2291-2317``
   ``dispatch_attn_forward_method``) asks ``AttentionBackendRegistry.get_handler("torch_native")``,
   which has no entry and falls back to the triton handler
   (``models/deepseek_common/attention_backend_handler.py`` ``get_handler``, ``handle_attention_triton``):
   MHA for an extend without prefix. The MHA prefill hands the decompressed K/V to ``attn_mha`` with
   ``save_kv_cache=False`` (``attention_forward_methods/forward_mha.py:296-317``
   ``forward_normal_core``), but ``TorchNativeAttnBackend.forward_extend`` never reads the K/V it is
   handed: it reads them back from the KV pool (``torch_native_backend.py:312-317``), and an MLA
   target's pool (``MLATokenToKVPool``) holds the compressed latent ``[kv_lora_rank + qk_rope_head_dim]``,
   one head. So the prefill attends over the latent as if it were K and V: a shape error on a real
   DeepSeek-V3 (576 vs 192), and silently wrong attention where the widths happen to agree. The
   patch registers a ``torch_native`` handler that returns SGLang's own absorbed-MLA choice
   (``_dispatch_mla_subtype``: ``AttnForwardMethod.MLA``) for every mode: the path SGLang already
   runs for decode and target verify on this backend, and for prefill under deterministic inference
   (``handle_attention_triton``: "when deterministic inference is enabled, use MLA") and in captured
   prefill. The latent pool then holds what the MLA path writes and reads. Nothing changes for
   non-MLA targets (only DeepSeek-family attention asks this registry).

#12 (the MLA EAGLE-3 draft, Kimi-K2.5's) ``Eagle3DeepseekV2ForCausalLM.set_embed`` / ``set_embed_and_head``
   (``models/kimi_k25_eagle3.py:404-423``) call ``torch.cuda.empty_cache()`` and
   ``torch.cuda.synchronize()`` unconditionally after sharing the target's embedding: "Torch not
   compiled with CUDA enabled" on CPU, at draft start (``speculative/eagle_worker_v2.py:363``
   ``init_lm_head``). The patch gives them the bodies of SGLang's own platform-aware versions of the
   same methods, ``LlamaForCausalLM.set_embed`` / ``set_embed_and_head`` (``models/llama.py:895-924``:
   the same assignments, then ``current_platform.empty_cache()`` / ``synchronize()``). On CUDA nothing
   is patched (the stand-ins are CPU only).

All are installed by a post-import hook (:func:`install`) so they apply in every SGLang process,
and both check :data:`GUARDS` (version and source digests) first.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any, Callable

_PATCHED = "_eagle3_conformance_patch"
"""The attribute set on every function this module installs (a class is patched once per process)."""


def _mark(fn: Callable[..., Any]) -> None:
    setattr(fn, _PATCHED, True)


GUARDS: dict[tuple[str, str], str] = {
    ("sglang.srt.speculative.draft_utils", "DraftBackendFactory._create_backend"): "3124ca2396c60d24",
    ("sglang.srt.layers.attention.torch_native_backend", "TorchNativeAttnBackend.forward_extend"): "71c0c1fefbef0ce0",
    ("sglang.srt.layers.attention.torch_native_backend", "TorchNativeAttnBackend.forward_decode"): "9b6aa60009d744b4",
    ("sglang.srt.layers.attention.torch_native_backend", "TorchNativeAttnBackend._run_sdpa_forward_extend"): "5ce429c04fa0f38b",
    # patch #11: the registry's fallback, the MHA hand-off it would take, the MLA choice it returns instead
    ("sglang.srt.models.deepseek_common.attention_backend_handler", "AttentionBackendRegistry"): "a6ed3a23e3d4e38b",
    ("sglang.srt.models.deepseek_common.attention_backend_handler", "handle_attention_triton"): "d2e7f2c60d1af82a",
    ("sglang.srt.models.deepseek_common.attention_backend_handler", "_dispatch_mla_subtype"): "a6ff22fdde9301cf",
    ("sglang.srt.models.deepseek_common.attention_forward_methods.forward_mha",
     "DeepseekMHAForwardMixin.forward_normal_core"): "97ef8d333777333f",
    ("sglang.srt.models.deepseek_v2", "DeepseekV2AttentionMLA.dispatch_attn_forward_method"): "c5113868b1f77873",
    # patch #12: the MLA draft's CUDA-only embedding hand-over, and the platform-aware versions it follows
    ("sglang.srt.models.kimi_k25_eagle3", "Eagle3DeepseekV2ForCausalLM.set_embed"): "bd5900a62001f7de",
    ("sglang.srt.models.kimi_k25_eagle3", "Eagle3DeepseekV2ForCausalLM.set_embed_and_head"): "bdf1ce1912fa083e",
    ("sglang.srt.models.llama", "LlamaForCausalLM.set_embed"): "a3d0be5d0d13a15a",
    ("sglang.srt.models.llama", "LlamaForCausalLM.set_embed_and_head"): "928c119c0254dc50",
}
"""(SGLang module, function) -> source digest the patches were written against."""


class PatchError(RuntimeError):
    """A patch cannot serve this request (a draft tree on the chain-only torch_native path)."""


def _multi_step_class():
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    class TorchNativeDraftStepBackend(TorchNativeAttnBackend):
        """Draft decode step ``step``: SGLang's torch_native decode over ``seq_lens + step + 1`` keys."""

        def __init__(self, model_runner, step: int):
            super().__init__(model_runner)
            self.step = step

        def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True):
            saved = forward_batch.seq_lens
            forward_batch.seq_lens = saved + self.step + 1
            try:
                return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache)
            finally:
                forward_batch.seq_lens = saved

    class TorchNativeMultiStepDraftBackend:
        """Per-step draft decode backends for a topk-1 chain (patch #9)."""

        def __init__(self, model_runner, topk: int, speculative_num_steps: int):
            if topk != 1:
                raise PatchError(f"the torch_native EAGLE draft backend (patch #9) runs topk-1 chains only; "
                                 f"speculative_eagle_topk={topk}")
            self.topk = topk
            self.speculative_num_steps = speculative_num_steps
            self.attn_backends = [TorchNativeDraftStepBackend(model_runner, s)
                                  for s in range(speculative_num_steps - 1)]

        def init_forward_metadata(self, forward_batch):
            for b in self.attn_backends:
                b.init_forward_metadata(forward_batch)

    return TorchNativeAttnBackend, TorchNativeMultiStepDraftBackend


def _patch_draft_utils(mod) -> None:
    factory = mod.DraftBackendFactory
    original = factory._create_backend
    if getattr(original, _PATCHED, False):
        return

    def _create_backend(self, backend_name, backend_map, error_template, stamps_children=False):
        plain, multi = _multi_step_class()
        backend_map = dict(backend_map)
        if stamps_children:  # the multi-step draft decode backend (create_decode_backend)
            backend_map.setdefault("torch_native", lambda: ("torch_native", multi(
                self.draft_model_runner, self.topk, self.speculative_num_steps)))
        else:  # draft extend
            backend_map.setdefault("torch_native", lambda: ("torch_native", plain(self.draft_model_runner)))
        return original(self, backend_name, backend_map, error_template, stamps_children)

    _mark(_create_backend)
    factory._create_backend = _create_backend


def _patch_torch_native(mod) -> None:
    cls = mod.TorchNativeAttnBackend
    original = cls.forward_extend
    if getattr(original, _PATCHED, False):
        return

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        if not forward_batch.forward_mode.is_target_verify():
            return original(self, q, k, v, layer, forward_batch, save_kv_cache)
        import torch

        spec = forward_batch.spec_info
        if spec is None:
            raise PatchError("TARGET_VERIFY without spec_info: nothing to derive the verify lengths from")
        if getattr(spec, "topk", 1) != 1:
            raise PatchError(f"TARGET_VERIFY on torch_native (patch #10) runs topk-1 chains only (the backend "
                             f"ignores spec_info.custom_mask); topk={spec.topk}")
        n = int(spec.draft_token_num)
        saved = (forward_batch.extend_prefix_lens, forward_batch.extend_seq_lens, forward_batch.seq_lens)
        seq = forward_batch.seq_lens
        forward_batch.extend_prefix_lens = seq
        forward_batch.extend_seq_lens = torch.full_like(seq, n)
        forward_batch.seq_lens = seq + n
        try:
            return original(self, q, k, v, layer, forward_batch, save_kv_cache)
        finally:
            forward_batch.extend_prefix_lens, forward_batch.extend_seq_lens, forward_batch.seq_lens = saved

    _mark(forward_extend)
    cls.forward_extend = forward_extend


def handle_attention_torch_native(attn, forward_batch):
    """Patch #11: DeepSeek-family attention on torch_native runs SGLang's absorbed MLA in every mode."""
    from sglang.srt.models.deepseek_common import attention_backend_handler as h

    return h._dispatch_mla_subtype(attn, forward_batch)


_mark(handle_attention_torch_native)


def _patch_mla_dispatch(mod) -> None:
    if getattr(mod.AttentionBackendRegistry._handlers.get("torch_native"), _PATCHED, False):
        return
    if "torch_native" in mod.AttentionBackendRegistry._handlers:
        raise PatchError("SGLang registers its own torch_native handler for MLA attention: patch #11 is stale "
                         "(models/deepseek_common/attention_backend_handler.py)")
    mod.AttentionBackendRegistry.register("torch_native", handle_attention_torch_native)


def _patch_mla_draft_embed(mod) -> None:
    cls = mod.Eagle3DeepseekV2ForCausalLM
    if getattr(cls.set_embed, _PATCHED, False):
        return

    def _settle():
        from sglang.srt.platforms import current_platform

        current_platform.empty_cache()
        current_platform.synchronize()

    def set_embed(self, embed) -> None:
        tw = getattr(self.config, "target_hidden_size", None)
        if tw is not None and tw != self.config.hidden_size:  # widths differ: not shared (kimi_k25_eagle3.py:405-410)
            return
        del self.model.embed_tokens.weight
        self.model.embed_tokens.weight = embed
        _settle()

    def set_embed_and_head(self, embed, head) -> None:
        del self.model.embed_tokens.weight
        del self.lm_head.weight
        self.model.embed_tokens.weight = embed
        self.lm_head.weight = head
        _settle()

    for fn in (set_embed, set_embed_and_head):
        _mark(fn)
        setattr(cls, fn.__name__, fn)


PATCHES = {
    "sglang.srt.speculative.draft_utils": _patch_draft_utils,
    "sglang.srt.layers.attention.torch_native_backend": _patch_torch_native,
    "sglang.srt.models.deepseek_common.attention_backend_handler": _patch_mla_dispatch,
    "sglang.srt.models.kimi_k25_eagle3": _patch_mla_draft_embed,
}


class _PostImport(importlib.abc.MetaPathFinder):
    """Applies :data:`PATCHES` right after the named module is executed."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                loader = spec.loader
                exec_module = loader.exec_module

                def patched_exec(module, _exec=exec_module, _name=fullname):
                    _exec(module)
                    PATCHES[_name](module)

                loader.exec_module = patched_exec
                return spec
        return None


def install() -> None:
    """Apply the patches now to already-imported modules, and on import to the others."""
    for name, fn in PATCHES.items():
        if name in sys.modules:
            fn(sys.modules[name])
    if not any(isinstance(f, _PostImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImport())
