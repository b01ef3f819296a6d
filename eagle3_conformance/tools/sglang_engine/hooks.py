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
``extend_seq_lens`` [bs] or None, ``rids`` (SGLang's request ids, ``ForwardBatch.rids``, in batch
order; None where the batch carries none), ``return_logprob`` (the batch asked for logprobs); for the draft also ``hidden`` [N, W] (``spec_info.hidden_states``,
the tensor handed to the draft), ``fc_input`` [N, W] or None (what ``fc`` received in the same
forward: None when the draft skipped fc, ``llama_eagle3.py:237-247``), ``num_accept_tokens`` [bs]
or None (DRAFT_EXTEND_V2). Target records carry no tensors beyond the ids (their hidden states
are not needed: the reference is the project's own forward) but ``layers_to_capture``, the layer
indices the target's ``LlamaModel`` captures at (``llama.py:485-494``: entry i = B_i), and where their
tokens sit in the KV cache (:func:`kv_fields`: ``out_cache_loc``; on EXTEND ``extend_prefix_lens`` and
``prefix_locs`` when ``config["req_to_token"]`` is given), so a server's rows can be attributed without
the prompts. Hooks never fire on CUDA-graph
replay (``cuda_graph_setup.py:454-457``): run with ``disable_cuda_graph`` to observe decode.

The engine as its own reference (``spec(out_dir, reference=...)``; rules per family in
:mod:`.boundaries`). One more hook spec per recorded boundary, on the exact target module that hands
it on (``model.embed_tokens`` for B_0, ``model.layers.<k-1>`` for B_k, ``model.norm`` for F; the
draft's own ``model.embed_tokens`` / ``model.layers.0`` / ``model.norm`` also match, and what they
give is dropped when the draft's ``model`` hook closes its forward). Each TARGET record of a
recorded mode (EXTEND, TARGET_VERIFY) then also carries:

``ref_boundaries`` list[str]: the boundaries in ``ref_states`` order, ascending (B_0..B_L, F);
``ref_rows`` [n] int64: which rows of this forward (indices into ``input_ids``) were recorded;
``ref_states`` [len(ref_boundaries), n, d] in the engine's dtype (``ref_dtype``, e.g. "torch.float32");
``ref_missing`` list[str]: configured boundaries no hook gave in this forward;
``ref_errors`` list[str]: why a hook could not compute its boundary (the engine is never stopped);
``ref_dropped`` str or None: the byte budget was spent; no states from this forward on;
``ref_rank`` dict: ``tp_rank``, ``tp_size``, ``attn_tp_rank``, ``attn_tp_size``, ``pp_rank``,
``pp_size``, ``records`` (:func:`.boundaries.recording_rank`); ``ref_format`` int: 1.

Only the recording rank (attention-TP rank 0; :func:`.boundaries.recording_rank`) writes any record;
the other ranks still run the boundary hooks (an owed TP sum is completed collectively). The hook
config's ``reference`` dict: ``boundaries`` (list[str]), ``max_rows`` (rows per forward, int or
None: all), ``max_bytes`` (bytes of ``ref_states`` per process, int or None), ``prefix`` (module
path of the decoder stack, default ``model``).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any, Optional

FACTORY = "eagle3_conformance.tools.sglang_engine.hooks:draft_input_recorder"
BOUNDARY_FACTORY = "eagle3_conformance.tools.sglang_engine.hooks:boundary_recorder"
LOGITS_FACTORY = "eagle3_conformance.tools.sglang_engine.hooks:logits_recorder"
RUNTIME_DIR = "runtime"
TARGET_MODULES = ["model", "model.fc"]
REF_FORMAT = 1
REF_MODES = ("EXTEND", "TARGET_VERIFY")
_STATE: dict[str, dict[str, Any]] = {}  # out_dir -> this process's shared recorder state
_COUNTER = itertools.count()  # one per process: the target's and the draft's hooks share the numbering
RECORD_MODES = ("EXTEND", "TARGET_VERIFY", "DRAFT_EXTEND_V2", "DRAFT_EXTEND", "DECODE")


def spec(out_dir: str | Path, reference: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The ``forward_hooks`` entry recording into ``out_dir`` (the draft input, the target's ids).
    With ``reference`` use :func:`specs` (it adds the boundary hooks)."""
    cfg: dict[str, Any] = {"out_dir": str(out_dir)}
    if reference:
        cfg["reference"] = dict(reference)
    prefix = (reference or {}).get("prefix", "model")
    mods = list(TARGET_MODULES) if prefix == "model" else [prefix, "model", "model.fc"]
    return {"name": "eagle3-conformance-draft-input", "target_modules": mods, "hook_factory": FACTORY,
            "config": cfg}


def logits_spec(out_dir: str | Path) -> dict[str, Any]:
    """The ``forward_hooks`` entry recording each forward's logits summary (:func:`logits_recorder`)."""
    return {"name": "eagle3-conformance-logits", "target_modules": ["logits_processor"],
            "hook_factory": LOGITS_FACTORY, "config": {"out_dir": str(out_dir)}}


def specs(out_dir: str | Path, reference: Optional[dict[str, Any]] = None) -> list[dict[str, Any]]:
    """Every ``forward_hooks`` entry: :func:`spec`, one per recorded boundary (module docstring), and
    :func:`logits_spec` last.

    Args:
        reference: None (no boundaries), or ``{"boundaries": [...], "max_rows": int|None,
            "max_bytes": int|None, "prefix": "model"}``.
    """
    from eagle3_conformance.tools.sglang_engine.boundaries import target_modules

    out = [spec(out_dir, reference)]
    if reference:
        for mod, b in target_modules(list(reference["boundaries"]), reference.get("prefix", "model")).items():
            out.append({"name": f"eagle3-conformance-{b}", "target_modules": [mod], "hook_factory": BOUNDARY_FACTORY,
                        "config": {"out_dir": str(out_dir), "boundary": b}})
    return out + [logits_spec(out_dir)]


def _state(out_dir: str) -> dict[str, Any]:
    st = _STATE.get(out_dir)
    if st is None:
        st = _STATE[out_dir] = {"pending": {}, "errors": [], "bytes": 0, "rank": None, "last": None,
                                "draft_model": False}
    return st


def _runtime_record(out_dir: str, rec: dict[str, Any]) -> None:
    """One small record of the draft's runtime under ``out_dir/runtime/`` (:mod:`.runtime` reads them)."""
    import torch

    d = Path(out_dir) / RUNTIME_DIR
    d.mkdir(parents=True, exist_ok=True)
    torch.save(rec, d / f"{os.getpid()}-{next(_COUNTER):06d}.pt")


def draft_model_record(module) -> dict[str, Any]:
    """What the engine built for the draft (``module``: the draft's ``model``, the one holding ``fc``):
    ``dtype`` (its fc weight's dtype: the dtype the draft runs in) and ``layers`` {module name:
    {"method": the class of its ``quant_method``, "module": its class, "weight_dtype": its weight's dtype}} for every
    submodule SGLang gave a ``quant_method`` (``layers/linear.py``: ``UnquantizedLinearMethod``,
    ``Fp8LinearMethod``, ...)."""
    layers = {}
    for name, sub in module.named_modules():
        qm = getattr(sub, "quant_method", None)
        if qm is None:
            continue
        w = getattr(sub, "weight", None)
        layers[name] = {"method": type(qm).__name__, "module": type(sub).__name__,
                        "weight_dtype": str(getattr(w, "dtype", None))}
    return {"kind": "draft_model", "dtype": str(module.fc.weight.dtype), "layers": layers}


def logits_recorder(config: dict):
    """``forward_hooks`` factory for every model's ``logits_processor``: per forward one record
    ``{"kind": "logits", "role" (the role of the ``model`` forward just before, "draft" or "target"),
    "mode", "rows", "nonfinite_rows", "dtype", "argmax" (the first 8 non-finite rows' argmax ids)}``;
    written on the recording rank only when a reference is recorded, as the draft-input records are."""
    out_dir = str(config["out_dir"])
    st = _state(out_dir)

    def hook(module, args, output):
        import torch

        try:
            last = st.get("last") or {}
            logits = getattr(output, "next_token_logits", None)
            if logits is None or not last:
                return None
            x = logits.detach()
            bad = ~torch.isfinite(x).all(dim=-1)
            n_bad = int(bad.sum())
            _runtime_record(out_dir, {
                "kind": "logits", "role": last.get("role"), "mode": last.get("mode"), "rows": int(x.shape[0]),
                "nonfinite_rows": n_bad, "dtype": str(x.dtype),
                "argmax": x[bad][:8].float().argmax(dim=-1).tolist() if n_bad else []})
        except Exception as e:  # noqa: BLE001 - a hook must never stop the engine
            st["errors"].append(f"logits: {type(e).__name__}: {e}")
        return None

    return hook


def _rank(st: dict) -> dict:
    if st["rank"] is None:
        from eagle3_conformance.tools.sglang_engine.boundaries import recording_rank

        st["rank"] = recording_rank()
    return st["rank"]


def boundary_recorder(config: dict):
    """``forward_hooks`` factory for one boundary (``config["boundary"]``): keeps this forward's
    full [N, d] boundary until the target's ``model`` hook writes the record (module docstring)."""
    b = str(config["boundary"])
    st = _state(str(config["out_dir"]))

    def hook(module, args, output):
        from eagle3_conformance.tools.sglang_engine.boundaries import layer_output, norm_output

        try:
            if b == "F":
                t = norm_output(output)
            elif b == "B_0":
                t = output[0] if isinstance(output, tuple) else output
            else:
                t = layer_output(args, output)
            st["pending"][b] = t.detach()
        except Exception as e:  # noqa: BLE001 - a hook must never stop the engine
            st["errors"].append(f"{b}: {type(e).__name__}: {e}")
        return None

    return hook


def _reference_fields(st: dict, ref_cfg: dict, n_rows: int) -> dict[str, Any]:
    """The ``ref_*`` fields of one target record from this forward's pending boundaries."""
    import torch

    from eagle3_conformance.tools.sglang_engine.boundaries import sample_rows

    want = list(ref_cfg.get("boundaries", []))
    have = [b for b in want if b in st["pending"] and st["pending"][b].shape[0] == n_rows]
    errors = list(st["errors"]) + [
        f"{b}: {st['pending'][b].shape[0]} rows on this rank, the forward has {n_rows} (a residual scattered over "
        "ranks: attention-TP scatter / a2a MoE, deepseek_v2.py gathers its aux capture, stage.py:461-480)"
        for b in want if b in st["pending"] and st["pending"][b].shape[0] != n_rows]
    rec: dict[str, Any] = {"ref_format": REF_FORMAT, "ref_rank": dict(_rank(st)), "ref_errors": errors,
                           "ref_missing": [b for b in want if b not in have], "ref_dropped": None}
    rows = sample_rows(n_rows, ref_cfg.get("max_rows"))
    if have and rows:
        idx = torch.tensor(rows, dtype=torch.long)
        states = torch.stack([st["pending"][b].index_select(0, idx.to(st["pending"][b].device)) for b in have])
        nbytes = states.numel() * states.element_size()
        cap = ref_cfg.get("max_bytes")
        if cap is not None and st["bytes"] + nbytes > int(cap):
            rec["ref_dropped"] = f"byte budget {int(cap)} spent ({st['bytes']} written)"
            have, idx, states = [], idx[:0], None
        else:
            st["bytes"] += nbytes
        rec.update(ref_boundaries=have, ref_rows=idx, ref_dtype=str(states.dtype) if states is not None else None,
                   ref_states=None if states is None else _cpu(states))
    else:
        rec.update(ref_boundaries=[], ref_rows=torch.zeros(0, dtype=torch.long), ref_states=None, ref_dtype=None)
    return rec


def _cpu(t):
    return None if t is None else t.detach().to("cpu").clone()


def kv_fields(fb, mode: str, pool=None) -> dict[str, Any]:
    """Where a target forward's tokens live in SGLang's KV cache, so rows can be attributed to a
    request's tokens without knowing the prompts (a server's records, :mod:`eagle3_conformance.serving.captures`):
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
    """``forward_hooks`` factory: returns the hook (see the module docstring). SGLang calls it once the model
    runner is built, so in the engine tool's own processes it also freezes what the start built
    (:func:`.bootstrap.engine_built`)."""
    import torch

    from eagle3_conformance.tools.sglang_engine.bootstrap import engine_built

    engine_built()
    out = Path(config["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    pending: dict[str, Any] = {}
    ref_cfg = config.get("reference")
    st = _state(str(out))

    def hook(module, args, output):
        if not hasattr(module, "embed_tokens"):  # the draft's fc: remember its input for this forward
            if "fc_input" not in pending and args:
                pending["fc_input"] = _cpu(args[0])
            return None
        fb = args[2] if len(args) > 2 else None
        mode = getattr(getattr(fb, "forward_mode", None), "name", "")
        draft = hasattr(module, "fc")
        fc_input = pending.pop("fc_input", None)
        boundaries, errors = dict(st["pending"]), list(st["errors"])
        st["pending"].clear()  # this forward's boundaries (the draft's own: dropped)
        st["errors"].clear()
        if ref_cfg is not None and not _rank(st)["records"]:
            st["last"] = None
            return None  # one rank writes (module docstring)
        st["last"] = {"role": "draft" if draft else "target", "mode": mode}  # for the logits hook
        if draft and not st["draft_model"]:
            st["draft_model"] = True
            _runtime_record(str(out), draft_model_record(module))
        if fb is None or mode not in RECORD_MODES or (not draft and mode == "DECODE"):
            return None
        rec = dict(role="draft" if draft else "target", mode=mode, input_ids=_cpu(args[0]).long(),
                   positions=_cpu(args[1]).long(), req_pool_indices=_cpu(fb.req_pool_indices),
                   seq_lens=_cpu(fb.seq_lens), extend_seq_lens=_cpu(getattr(fb, "extend_seq_lens", None)),
                   rids=[str(r) for r in fb.rids] if getattr(fb, "rids", None) else None,
                   return_logprob=bool(getattr(fb, "return_logprob", False)))
        if not draft:
            rec["layers_to_capture"] = [int(i) for i in getattr(module, "layers_to_capture", []) or []]
            rec.update(kv_fields(fb, mode, config.get("req_to_token")))
            if ref_cfg is not None and mode in REF_MODES:
                st["pending"], st["errors"] = boundaries, errors
                try:
                    rec.update(_reference_fields(st, ref_cfg, int(rec["input_ids"].shape[0])))
                finally:
                    st["pending"], st["errors"] = {}, []
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
