"""Faults caused inside vLLM's worker the way field reports describe them, for the kill matrix's
``vllm-engine-invariance`` column (:mod:`eagle3_conformance.faults.vllm_invariance_column`).

Sent by ``LLM.collective_rpc`` (vLLM's own extension point, as :mod:`.hooks`), installed *before* the
recording hooks: a forward pre-hook that returns new arguments replaces them for the hooks after it, so
:mod:`.hooks` records what the fault handed the draft. Nothing in vLLM is edited.

* ``cache-hit-normed-state`` (R95): a request whose prefill starts past position 0 because its prefix
  was in vLLM's prefix cache (``enable_prefix_caching``) hands the draft the target's normed state F
  (``model.model.norm``'s output in the same forward) in every aux slot, on its recomputed rows:
  what the report saw when the recycled state was the normed one. A request is a cache hit when its
  first scheduled position is past 0 and inside its prompt (``input_batch.num_prompt_tokens``); a later
  chunk of a chunked prefill meets that too, so the fault belongs to runs without chunking.
"""

from __future__ import annotations

from typing import Any

_STATE: dict[str, Any] = {"handles": [], "layout": None, "normed": None}

#: fault name -> what it does (the column's :class:`~eagle3_conformance.faults.vllm_invariance_column.InvarianceFault`)
FAULTS = {"cache-hit-normed-state": "a prefix-cache hit's recomputed rows get the normed state F in every aux slot"}


def _arg(args, kwargs, i: int, name: str):
    return kwargs[name] if name in kwargs else (args[i] if len(args) > i else None)


def _layout(runner):
    def hook(module, args, kwargs):
        n = int(runner.input_batch.num_reqs)
        pos = _arg(args, kwargs, 1, "positions")
        _STATE["layout"] = {"positions": pos.detach().reshape(-1).cpu(), "qsl": [int(x) for x in runner.query_start_loc.np[:n + 1]],
                            "prompt_len": [int(x) for x in runner.input_batch.num_prompt_tokens[:n]]}
        _STATE["normed"] = None
    return hook


def _normed(module, args, output):
    _STATE["normed"] = (output[0] if isinstance(output, tuple) else output).detach()


def _cache_hit_rows(layout: dict, n: int) -> list[tuple[int, int]]:
    """(start, stop) of each request's rows in this forward whose first position is a cached prefix's end."""
    out = []
    q, pos = layout["qsl"], layout["positions"]
    for j in range(len(q) - 1):
        a, b = q[j], min(q[j + 1], n)
        if a < b and 0 < int(pos[a]) < layout["prompt_len"][j]:
            out.append((a, b))
    return out


def _fc_fault(module, args):
    layout, normed = _STATE["layout"], _STATE["normed"]
    if layout is None or normed is None:
        return None
    x = args[0]
    spans = _cache_hit_rows(layout, x.shape[0])
    if not spans:
        return None
    x = x.clone()
    k = x.shape[-1] // normed.shape[-1]
    for a, b in spans:
        x[a:b] = normed[a:b].to(x.dtype).repeat(1, k)
    return (x,) + tuple(args[1:])


def install(worker, names: list[str]) -> list[str]:
    """Register the faults ``names`` in this worker (before :func:`.hooks.install`); returns them.

    Raises:
        ValueError: a name not in :data:`FAULTS`."""
    bad = [n for n in names if n not in FAULTS]
    if bad:
        raise ValueError(f"unknown vLLM fault(s) {bad}; known: {', '.join(FAULTS)}")
    runner = worker.model_runner
    fc = runner.drafter.model.model.fc
    h = _STATE["handles"]
    if "cache-hit-normed-state" in names:
        h.append(runner.model.register_forward_pre_hook(_layout(runner), with_kwargs=True))
        h.append(runner.model.model.norm.register_forward_hook(_normed))
        h.append(fc.register_forward_pre_hook(_fc_fault))
    return list(names)
