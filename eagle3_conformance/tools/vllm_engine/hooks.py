"""What runs inside vLLM's worker process, sent there by ``LLM.collective_rpc`` (vLLM's own
extension point, ``vllm/entrypoints/llm.py:574``; a callable needs
``VLLM_ALLOW_INSECURE_SERIALIZATION=1``, ``vllm/v1/serial_utils.py:213-223``). Nothing in vLLM is
edited: :func:`install` registers ordinary PyTorch forward hooks on the worker's modules and
:func:`collect` removes them and writes what they recorded.

Modules hooked (vLLM 0.32.0 CPU build and the GPU build share them: ``CPUModelRunner`` subclasses
``GPUModelRunner``, ``vllm/v1/worker/cpu_model_runner.py:23``):

* the target: ``worker.model_runner.model`` (``LlamaForCausalLM``; not its ``.model``, whose
  ``__call__`` ``@support_torch_compile`` replaces, ``llama.py:337``): a pre-hook records each forward's
  ``input_ids`` and ``positions`` with the batch layout the runner built for it
  (``model_runner.input_batch.req_ids`` and ``model_runner.query_start_loc.np``,
  ``gpu_model_runner.py:2029-2034``); with ``residual=True`` also ``embed_tokens``'s output (B_0)
  and every decoder layer's output ``hidden + residual`` (layer k-1's output = B_k, the quantity vLLM's
  aux capture adds up, ``model_executor/models/interfaces.py:1601-1611``), so the engine is its own
  reference;
* the drafter: ``worker.model_runner.drafter.model`` (``Eagle3LlamaForCausalLM``): a pre-hook on
  ``model.fc`` records the tensor ``combine_hidden_states`` hands ``fc`` (``llama_eagle3.py:397``;
  called once per propose on the target's aux concat, ``v1/spec_decode/llm_base_proposer.py:550``),
  a pre-hook on ``model.input_norm`` (only with ``norm_before_fc``) the concat before that norm, and a
  pre-hook on the draft model the ``input_ids`` / ``positions`` of each draft forward.

Records are dicts of CPU tensors, one per forward, in call order; :func:`collect` saves them as
``NNNNNN.pt`` (``torch.save``; read back with ``weights_only=True``) and the logits summaries as
``runtime.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

_STATE: dict[str, Any] = {"records": [], "handles": [], "logits": []}
RUNTIME_FILE = "runtime.json"


def _arg(args, kwargs, i: int, name: str):
    return kwargs[name] if name in kwargs else (args[i] if len(args) > i else None)


def _target_pre(runner):
    def hook(module, args, kwargs):
        ids, pos = _arg(args, kwargs, 0, "input_ids"), _arg(args, kwargs, 1, "positions")
        n = int(runner.input_batch.num_reqs)
        _STATE["records"].append({
            "role": "target", "input_ids": None if ids is None else ids.detach().cpu().clone(),
            "positions": pos.detach().cpu().clone(), "req_ids": list(runner.input_batch.req_ids)[:n],
            "query_start_loc": [int(x) for x in runner.query_start_loc.np[:n + 1]], "residual": {}})
    return hook


def _boundary_hook(k: int):
    def hook(module, args, output):
        rec = _STATE["records"][-1] if _STATE["records"] else None
        if rec is None or rec["role"] != "target":
            return
        x = output if k == 0 else (output[0] + output[1] if output[1] is not None else output[0])
        rec["residual"][k] = x.detach().cpu().clone()
    return hook


def _fc_pre(module, args):
    x = args[0].detach().cpu().clone()
    pre = _STATE.pop("pre_norm", None)
    _STATE["records"].append({"role": "fc", "fc_input": x, "hidden": x if pre is None else pre})


def _norm_pre(module, args):
    _STATE["pre_norm"] = args[0].detach().cpu().clone()


def _draft_pre(module, args, kwargs):
    ids, pos = _arg(args, kwargs, 0, "input_ids"), _arg(args, kwargs, 1, "positions")
    _STATE["records"].append({"role": "draft", "input_ids": None if ids is None else ids.detach().cpu().clone(),
                              "positions": pos.detach().cpu().clone()})


def _logits_hook(module, args, output):
    """The drafter's ``logits_processor`` output: rows, non-finite rows, the first non-finite rows' argmax
    (issue 45 item 2, R89)."""
    import torch

    x = output.detach() if torch.is_tensor(output) else None
    if x is None:
        return
    bad = ~torch.isfinite(x).all(dim=-1)
    n_bad = int(bad.sum())
    _STATE["logits"].append({"kind": "logits", "role": "draft", "mode": "propose", "rows": int(x.shape[0]),
                             "nonfinite_rows": n_bad, "dtype": str(x.dtype),
                             "argmax": x[bad][:8].float().argmax(dim=-1).tolist() if n_bad else []})


def draft_model(drafter) -> dict:
    """What vLLM built for the drafter: its ``fc`` weight's dtype (the dtype the draft runs in) and, per
    submodule with a ``quant_method``, that method's class, the module's class and the weight's dtype
    (the same record as SGLang's, :func:`eagle3_conformance.tools.sglang_engine.hooks.draft_model_record`)."""
    layers = {}
    for name, sub in drafter.model.named_modules():
        qm = getattr(sub, "quant_method", None)
        if qm is not None:
            layers[name] = {"method": type(qm).__name__, "module": type(sub).__name__,
                            "weight_dtype": str(getattr(getattr(sub, "weight", None), "dtype", None))}
    return {"kind": "draft_model", "dtype": str(drafter.model.fc.weight.dtype), "layers": layers}


def install(worker, residual: bool = True) -> dict:
    """Register the hooks in this worker; returns what the engine applied: ``aux_layers`` (the ids
    the target captures, ``model.model.aux_hidden_state_layers``: layer k's input = B_k),
    ``num_layers``, the drafter's class, ``fc`` in/out widths and ``norm_before_fc``.

    Raises:
        RuntimeError: the worker has no EAGLE-3 drafter with an ``fc`` (speculative decoding off,
            another method).
    """
    runner = worker.model_runner
    target = runner.model.model
    drafter = getattr(getattr(runner, "drafter", None), "model", None)
    fc = getattr(getattr(drafter, "model", None), "fc", None)
    if drafter is None or fc is None:
        raise RuntimeError(f"no EAGLE-3 drafter with an fc in this worker (drafter: {type(drafter).__name__})")
    _STATE["records"].clear()
    h = _STATE["handles"]
    # on runner.model (LlamaForCausalLM): LlamaModel's __call__ is replaced by @support_torch_compile
    # (model_executor/models/llama.py:337), so hooks on it never fire; its submodules' do
    h.append(runner.model.register_forward_pre_hook(_target_pre(runner), with_kwargs=True))
    if residual:
        h.append(target.embed_tokens.register_forward_hook(_boundary_hook(0)))
        for k, layer in enumerate(target.layers):
            h.append(layer.register_forward_hook(_boundary_hook(k + 1)))
    h.append(fc.register_forward_pre_hook(_fc_pre))
    norm = getattr(drafter.model, "input_norm", None) if getattr(drafter.model, "norm_before_fc", False) else None
    if norm is not None:
        h.append(norm.register_forward_pre_hook(_norm_pre))
    h.append(drafter.register_forward_pre_hook(_draft_pre, with_kwargs=True))
    _STATE["logits"].clear()
    lp = getattr(drafter, "logits_processor", None)
    if lp is not None:
        h.append(lp.register_forward_hook(_logits_hook))
    return {"aux_layers": [int(i) for i in getattr(target, "aux_hidden_state_layers", ())],
            "num_layers": len(target.layers), "drafter": type(drafter).__name__,
            "fc_in": int(getattr(fc, "input_size", 0)), "fc_out": int(getattr(fc, "output_size", 0)),
            "norm_before_fc": norm is not None, "draft_model": draft_model(drafter),
            "logits_hooked": lp is not None}


def collect(worker, out_dir: str) -> int:
    """Remove the hooks, write the records to ``out_dir`` (``000000.pt`` ...), return their count."""
    import torch

    for handle in _STATE["handles"]:
        handle.remove()
    _STATE["handles"].clear()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    recs = _STATE["records"]
    for i, rec in enumerate(recs):
        torch.save(rec, out / f"{i:06d}.pt")
    n = len(recs)
    recs.clear()
    import json

    (out / RUNTIME_FILE).write_text(json.dumps(_STATE["logits"]))
    _STATE["logits"].clear()
    return n
