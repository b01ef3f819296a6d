"""Faults caused inside vLLM's worker the way field reports describe them, for the kill matrix's
``vllm-engine-invariance`` column (:mod:`eagle3_conformance.faults.vllm_invariance_column`).

Sent by ``LLM.collective_rpc`` (vLLM's own extension point, as :mod:`.hooks`), installed *before* the
recording hooks: a forward pre-hook that returns new arguments replaces them for the hooks after it, so
:mod:`.hooks` records what the fault handed the draft. Nothing in vLLM is edited. Each fault acts only
under its report's condition, read off the batch layout vLLM's runner built for the target's forward
(a pre-hook on ``model_runner.model``: positions, ``query_start_loc``, ``input_batch.req_ids`` and
``num_prompt_tokens``, and ``model_runner.num_prompt_logprobs``, the requests in prefill that asked for
prompt logprobs, ``v1/worker/gpu_model_runner.py``), so the plain run is untouched:

==========================  =========  ==============================================================
fault                       report     what it does (a pre-hook on the drafter's ``fc`` unless said)
==========================  =========  ==============================================================
``cache-hit-normed-state``  R95        a request whose first scheduled position is past 0 and inside
                                       its prompt (its prefix hit ``enable_prefix_caching``'s cache)
                                       gets the target's normed state F (``model.model.norm``'s output
                                       in the same forward) in every aux slot on its recomputed rows
``batch-neighbour-rows``    R79, R105  in a forward holding several requests, request b > 0 gets
                                       request b - 1's rows (read at a neighbour's offset)
``logprob-aux-stale``       R102       a request that asked for prompt logprobs gets, on its prompt
                                       rows, the previous forward's aux rows (zeros past them)
``logprob-aux-missing``     R102       the same rows get zeros (the logprob path collected no aux)
``chunk-end-target-guess``  R84        a pre-hook on the drafter model's first pass of a propose: at a
                                       request's last row when it ends inside the prompt (a chunk end of
                                       a chunked prefill), the draft's input token is the target's guess
                                       (greedy, ``model_runner.model.compute_logits`` on F at that row),
                                       not the prompt's next token (SGLang before sgl-project/sglang#26329)
==========================  =========  ==============================================================

A later chunk of a chunked prefill also starts past 0 inside its prompt: ``cache-hit-normed-state``
belongs to runs without chunking. ``chunk-end-target-guess`` is meaningful only where vLLM itself hands
the draft the prompt's next token at a chunk end: with ``speculative_config``
``disable_padded_drafter_batch=True`` (vLLM 0.32.0's padded drafter batch hands it the prompt's *last*
token there, docs/paths.md), and there the drafter's first pass has the target forward's rows.
"""

from __future__ import annotations

from typing import Any

_STATE: dict[str, Any] = {"handles": [], "layout": None, "normed": None, "last": None, "first_pass": False,
                          "faults": ()}

#: fault name -> what it does (the column's :class:`~eagle3_conformance.faults.invariance_column.InvarianceFault`)
FAULTS = {
    "cache-hit-normed-state": "a prefix-cache hit's recomputed rows get the normed state F in every aux slot",
    "batch-neighbour-rows": "in a forward of several requests, request b > 0 gets request b - 1's aux rows",
    "logprob-aux-stale": "a prompt-logprob request's prompt rows get the previous forward's aux rows",
    "logprob-aux-missing": "a prompt-logprob request's prompt rows get zero aux rows",
    "chunk-end-target-guess": "at a chunk end inside the prompt the draft's input token is the target's guess",
}
_NEEDS_NORMED = ("cache-hit-normed-state", "chunk-end-target-guess")


def _arg(args, kwargs, i: int, name: str):
    return kwargs[name] if name in kwargs else (args[i] if len(args) > i else None)


def _layout(runner):
    def hook(module, args, kwargs):
        n = int(runner.input_batch.num_reqs)
        pos = _arg(args, kwargs, 1, "positions")
        asked = getattr(runner, "num_prompt_logprobs", {}) or {}
        req_ids = list(runner.input_batch.req_ids)[:n]
        _STATE.update(layout={"positions": pos.detach().reshape(-1).cpu(),
                              "qsl": [int(x) for x in runner.query_start_loc.np[:n + 1]],
                              "prompt_len": [int(x) for x in runner.input_batch.num_prompt_tokens[:n]],
                              "logprobs": [r in asked for r in req_ids]},
                      normed=None, first_pass=False)
    return hook


def _normed(module, args, output):
    _STATE["normed"] = (output[0] if isinstance(output, tuple) else output).detach()


def _spans(layout: dict, n: int) -> list[tuple[int, int, int]]:
    """(request index, start, stop) of each request's rows in this forward (rows < ``n``)."""
    q = layout["qsl"]
    return [(j, q[j], min(q[j + 1], n)) for j in range(len(q) - 1) if q[j] < min(q[j + 1], n)]


def _cache_hit_rows(layout: dict, n: int) -> list[tuple[int, int]]:
    """(start, stop) of each request's rows in this forward whose first position is a cached prefix's end."""
    pos = layout["positions"]
    return [(a, b) for j, a, b in _spans(layout, n) if 0 < int(pos[a]) < layout["prompt_len"][j]]


def _neighbour_rows(layout: dict, n: int) -> list[tuple[int, int, int]]:
    """(destination start, source start, rows) for each request b > 0 of this forward: request b - 1's
    rows at request b's offset, as many as both hold."""
    s = _spans(layout, n)
    return [(s[b][1], s[b - 1][1], min(s[b][2] - s[b][1], s[b - 1][2] - s[b - 1][1])) for b in range(1, len(s))]


def _logprob_rows(layout: dict, n: int) -> list[tuple[int, int]]:
    """(start, stop) of the prompt rows of each request in this forward that asked for prompt logprobs."""
    pos = layout["positions"]
    return [(a, a + sum(1 for r in range(a, b) if int(pos[r]) < layout["prompt_len"][j]))
            for j, a, b in _spans(layout, n) if layout["logprobs"][j] and int(pos[a]) < layout["prompt_len"][j]]


def _chunk_end_rows(layout: dict, n: int) -> list[int]:
    """The last row of each request of this forward whose rows end inside its prompt (a chunk end)."""
    pos = layout["positions"]
    return [b - 1 for j, a, b in _spans(layout, n) if int(pos[b - 1]) + 1 < layout["prompt_len"][j]]


def _fc_fault(module, args):
    layout, x = _STATE["layout"], args[0]
    if layout is None:
        return None
    _STATE["first_pass"] = True  # fc runs once per propose, just before the drafter's first pass
    faults, n = _STATE["faults"], x.shape[0]
    if not any(f in faults for f in ("cache-hit-normed-state", "batch-neighbour-rows", "logprob-aux-stale",
                                     "logprob-aux-missing")):
        return None
    y = x.clone()
    normed = _STATE["normed"]
    if "cache-hit-normed-state" in faults and normed is not None:
        k = x.shape[-1] // normed.shape[-1]
        for a, b in _cache_hit_rows(layout, n):
            y[a:b] = normed[a:b].to(x.dtype).repeat(1, k)
    if "batch-neighbour-rows" in faults:
        src = y.clone()
        for dst, s0, m in _neighbour_rows(layout, n):
            y[dst:dst + m] = src[s0:s0 + m]
    spans = _logprob_rows(layout, n)
    if not spans:
        _STATE["last"] = x.detach().clone()
    for a, b in spans:
        old = _STATE["last"] if "logprob-aux-stale" in faults else None
        if "logprob-aux-stale" in faults or "logprob-aux-missing" in faults:
            y[a:b] = 0
            if old is not None:
                m = min(b - a, old.shape[0])
                y[a:a + m] = old[:m].to(y.dtype)
    return None if _same(x, y) else (y,) + tuple(args[1:])


def _same(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))


def _chunk_end_guess(runner):
    def hook(module, args, kwargs):
        layout, normed = _STATE["layout"], _STATE["normed"]
        if not _STATE["first_pass"] or layout is None or normed is None:
            return None
        _STATE["first_pass"] = False
        ids = kwargs.get("input_ids")
        if ids is None or ids.shape[0] < layout["qsl"][-1]:
            return None
        rows = _chunk_end_rows(layout, normed.shape[0])
        if not rows:
            return None
        guess = runner.model.compute_logits(normed[rows]).argmax(dim=-1)
        ids = ids.clone()
        ids[rows] = guess.to(ids.dtype)
        return args, {**kwargs, "input_ids": ids}
    return hook


def install(worker, names: list[str]) -> list[str]:
    """Register the faults ``names`` in this worker (before :func:`.hooks.install`); returns them.

    Raises:
        ValueError: a name not in :data:`FAULTS`."""
    bad = [n for n in names if n not in FAULTS]
    if bad:
        raise ValueError(f"unknown vLLM fault(s) {bad}; known: {', '.join(FAULTS)}")
    runner = worker.model_runner
    drafter = runner.drafter.model
    h = _STATE["handles"]
    _STATE.update(faults=tuple(names), layout=None, normed=None, last=None, first_pass=False)
    if not names:
        return []
    h.append(runner.model.register_forward_pre_hook(_layout(runner), with_kwargs=True))
    if any(n in _NEEDS_NORMED for n in names):
        h.append(runner.model.model.norm.register_forward_hook(_normed))
    h.append(drafter.model.fc.register_forward_pre_hook(_fc_fault))  # also marks the drafter's first pass
    if "chunk-end-target-guess" in names:
        h.append(drafter.register_forward_pre_hook(_chunk_end_guess(runner), with_kwargs=True))
    return list(names)
