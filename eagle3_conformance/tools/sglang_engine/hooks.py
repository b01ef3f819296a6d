"""A hook factory for SGLang's own ``forward_hooks`` server argument: what enters the draft.

SGLang 0.5.23 (``sglang/srt/model_executor/hook_manager.py``, applied to every model runner's
model by ``cuda_graph_setup.py:452-459``) resolves ``hook_factory`` = ``"pkg.module:factory"``,
calls ``factory(config)`` and registers the returned callable with ``register_forward_hook`` on the
modules matching ``target_modules``. :func:`spec` builds that entry: the factory
:func:`draft_input_recorder` on ``model`` (the target's ``LlamaModel`` and the draft's eagle
``LlamaModel``) and ``model.fc`` (the draft's fc only).

One record per forward, ``torch.save``d to ``config["out_dir"]/<pid>-<n>.pt`` (dict):
``role`` ("draft" when the module has ``fc``, else "target"), ``mode`` (``ForwardMode`` name),
``input_ids`` [N] and ``positions`` [N] int64, ``req_pool_indices`` [bs], ``seq_lens`` [bs],
``extend_seq_lens`` [bs] or None; for the draft also ``hidden`` [N, W] (``spec_info.hidden_states``,
the tensor handed to the draft), ``fc_input`` [N, W] or None (what ``fc`` received in the same
forward: None when the draft skipped fc, ``llama_eagle3.py:237-247``), ``num_accept_tokens`` [bs]
or None (DRAFT_EXTEND_V2). Target records carry no tensors beyond the ids (their hidden states
are not needed: the reference is the project's own forward) but ``layers_to_capture``, the layer
indices the target's ``LlamaModel`` captures at (``llama.py:485-494``: entry i = B_i). Hooks never fire on CUDA-graph
replay (``cuda_graph_setup.py:454-457``): run with ``disable_cuda_graph`` to observe decode.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

FACTORY = "eagle3_conformance.tools.sglang_engine.hooks:draft_input_recorder"
TARGET_MODULES = ["model", "model.fc"]
_COUNTER = itertools.count()  # one per process: the target's and the draft's hooks share the numbering
RECORD_MODES = ("EXTEND", "TARGET_VERIFY", "DRAFT_EXTEND_V2", "DRAFT_EXTEND", "DECODE")


def spec(out_dir: str | Path) -> dict[str, Any]:
    """The ``forward_hooks`` entry recording into ``out_dir``."""
    return {"name": "eagle3-conformance-draft-input", "target_modules": list(TARGET_MODULES),
            "hook_factory": FACTORY, "config": {"out_dir": str(out_dir)}}


def _cpu(t):
    return None if t is None else t.detach().to("cpu").clone()


def kv_fields(fb, mode: str, pool=None) -> dict[str, Any]:
    """Where a target forward's tokens live in SGLang's KV cache, so rows can be attributed to a
    request's tokens without knowing the prompts (a server's records, :mod:`eagle3_conformance.server_captures`):
    ``out_cache_loc`` [N] (the KV slot each row's token is written to, ``ForwardBatch.out_cache_loc``)
    and, on EXTEND, ``extend_prefix_lens`` [bs] (each segment's first position) and ``prefix_locs`` [sum(prefix)] (the slots of each
    request's cached prefix, ``req_to_token_pool.req_to_token[req_pool_idx, :prefix_len]`` in
    ``req_pool_indices`` order: the radix cache's and earlier chunks' tokens; ``pool`` is the model
    runner's ``req_to_token_pool.req_to_token``, which ``ForwardBatch`` does not carry: None, no
    ``prefix_locs``)."""
    out = {"out_cache_loc": _cpu(getattr(fb, "out_cache_loc", None))}
    seg = getattr(fb, "extend_seq_lens_cpu", None) or _list(getattr(fb, "extend_seq_lens", None))
    if mode == "EXTEND" and pool is not None and seg:
        import torch

        starts = [sum(seg[:i]) for i in range(len(seg))]
        lens = [int(fb.positions[s]) for s in starts]  # a segment's first position = its cached prefix length
        rows = [pool[int(rp), :n].reshape(-1).long() for rp, n in zip(fb.req_pool_indices.tolist(), lens)]
        out.update(extend_prefix_lens=torch.tensor(lens, dtype=torch.int64), prefix_locs=_cpu(torch.cat(rows)))
    return out


def _list(t):
    return None if t is None else [int(x) for x in t.tolist()]


def draft_input_recorder(config: dict):
    """``forward_hooks`` factory: returns the hook (see the module docstring)."""
    import torch

    out = Path(config["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    pending: dict[str, Any] = {}

    def hook(module, args, output):
        if not hasattr(module, "embed_tokens"):  # the draft's fc: remember its input for this forward
            if "fc_input" not in pending and args:
                pending["fc_input"] = _cpu(args[0])
            return None
        fb = args[2] if len(args) > 2 else None
        mode = getattr(getattr(fb, "forward_mode", None), "name", "")
        draft = hasattr(module, "fc")
        fc_input = pending.pop("fc_input", None)
        if fb is None or mode not in RECORD_MODES or (not draft and mode == "DECODE"):
            return None
        rec = dict(role="draft" if draft else "target", mode=mode, input_ids=_cpu(args[0]).long(),
                   positions=_cpu(args[1]).long(), req_pool_indices=_cpu(fb.req_pool_indices),
                   seq_lens=_cpu(fb.seq_lens), extend_seq_lens=_cpu(getattr(fb, "extend_seq_lens", None)))
        if not draft:
            rec["layers_to_capture"] = [int(i) for i in getattr(module, "layers_to_capture", []) or []]
            rec.update(kv_fields(fb, mode, config.get("req_to_token")))
        if draft:
            spec_info = fb.spec_info
            rec.update(hidden=_cpu(spec_info.hidden_states), fc_input=fc_input,
                       num_accept_tokens=_cpu(getattr(spec_info, "num_accept_tokens", None)))
            if mode == "DECODE":  # the draft's own d-wide states: record only what fc did
                rec["hidden"] = None
                rec["hidden_width"] = int(spec_info.hidden_states.shape[-1])
        torch.save(rec, out / f"{os.getpid()}-{next(_COUNTER):06d}.pt")
        return None

    return hook
