"""Faults the field reports describe, caused inside the real ``sglang.Engine`` through SGLang's own
``forward_hooks`` (the kill matrix's invariance column, :mod:`eagle3_conformance.faults.invariance_column`,
chooses them; nothing here runs unless a fault is asked for).

Each fault is one ``forward_hooks`` entry (:func:`spec`) on the target's ``model`` (SGLang registers
it on the draft's ``model`` too, where it does nothing). A forward hook may return a replacement
output; these hooks change the aux hidden states the target hands the draft *in place* (SGLang's
``AuxHiddenStateList``, or a packed ``[N, K*d]`` tensor: ``layers/aux_hidden_states.py``) and only
under the condition of their field report, so the plain run is untouched:

=========================  ======  ================================================================
fault                      report  what it does
=========================  ======  ================================================================
``logprob-aux-stale``      R102    a forward that returns logprobs hands the draft the aux rows of the
                                   previous target EXTEND (stale rows; zeros when there is none)
``logprob-aux-missing``    R102    a forward that returns logprobs hands the draft zero rows (the
                                   logprob path collected no aux states)
``cache-hit-normed-state`` R95     a request whose prefix hit the cache gets the normed state F
                                   (the final norm's output) in every aux slot
``batch-neighbour-rows``   R79     in a batch, request b > 0 gets request b - 1's rows (indexed at a
                                   neighbour's offset)
``tp-partial-sum``         R87     under tensor parallelism every aux slot is summed as if partial:
                                   x tp_size
``chunk-end-target-guess`` R84     at a chunk end inside the prompt the draft's input token is the
                                   target's guess, not the prompt's next token
=========================  ======  ================================================================

``chunk-end-target-guess`` is not an aux change: the draft's input ids are built by the worker before
any hook runs (``speculative/eagle_worker_v2.py`` ``_draft_extend_for_prefill``; since
sgl-project/sglang#26329, the fix of R84, a chunk's tail token is the prompt's next token,
``batch.chunked_req_next_prompt_token``). Its hook, on the target's ``model`` and ``logits_processor``
and the draft's ``model.embed_tokens`` (:func:`_chunk_end_target_guess`), does what SGLang did before
#26329: at a chunk end inside the prompt the draft embeds the target's guess (the greedy next token of
that chunk's last row), written into the draft's input ids in place, so the draft's ``model`` and the
recorder see the token the draft embedded. No SGLang function is replaced.
"""

from __future__ import annotations

from typing import Any

FACTORY = "eagle3_conformance.tools.sglang_engine.fault_hooks:fault"
FAULTS = ("logprob-aux-stale", "logprob-aux-missing", "cache-hit-normed-state", "batch-neighbour-rows",
          "tp-partial-sum", "chunk-end-target-guess")


def spec(name: str) -> dict[str, Any]:
    """The ``forward_hooks`` entry causing fault ``name`` (one of :data:`FAULTS`).

    Raises:
        ValueError: an unknown fault."""
    if name not in FAULTS:
        raise ValueError(f"unknown in-engine fault {name!r}; known: {', '.join(FAULTS)}")
    mods = ["model", "model.embed_tokens", "logits_processor"] if name == "chunk-end-target-guess" else ["model"]
    return {"name": f"eagle3-conformance-fault-{name}", "target_modules": mods, "hook_factory": FACTORY,
            "config": {"fault": name}}


def _segments(fb) -> list[tuple[int, int, int]]:
    """(start row, rows, cached prefix) per request of an EXTEND forward."""
    lens = getattr(fb, "extend_seq_lens_cpu", None) or [int(x) for x in fb.extend_seq_lens.tolist()]
    out, start = [], 0
    for n in lens:
        out.append((start, int(n), int(fb.positions[start]) if n else 0))
        start += int(n)
    return out


def _apply(aux, f) -> None:
    """``f(t)`` in place on each aux tensor (the K slots of a list, or one packed [N, K*d] tensor)."""
    for t in _as_list(aux):
        f(t)


def _logprob(name: str, state: dict):
    def change(fb, out):
        hidden, aux = out
        if not getattr(fb, "return_logprob", False):
            state["last"] = [t.detach().clone() for t in _as_list(aux)]
            return
        if name == "logprob-aux-missing":
            _apply(aux, lambda t: t.zero_())
            return
        prev = state.get("last")
        for j, t in enumerate(_as_list(aux)):
            old = prev[j] if prev and j < len(prev) else None
            t.zero_()
            if old is not None:
                n = min(t.shape[0], old.shape[0])
                t[:n].copy_(old[:n])
    return change


def _as_list(aux) -> list:
    import torch

    return [aux] if isinstance(aux, torch.Tensor) else list(aux)


def _cache_hit(fb, out):
    hidden, aux = out
    for start, n, cached in _segments(fb):
        if cached > 0:
            for t in _as_list(aux):
                d = hidden.shape[-1]
                for k in range(t.shape[-1] // d):
                    t[start:start + n, k * d:(k + 1) * d].copy_(hidden[start:start + n])


def _neighbour(fb, out):
    _, aux = out
    segs = _segments(fb)
    for t in _as_list(aux):
        src = t.detach().clone()
        for b in range(1, len(segs)):
            (s0, n0, _), (s1, n1, _) = segs[b - 1], segs[b]
            m = min(n0, n1)
            t[s1:s1 + m].copy_(src[s0:s0 + m])


def _tp_sum(fb, out):
    from sglang.srt.distributed.parallel_state import get_tensor_model_parallel_world_size

    tp = get_tensor_model_parallel_world_size()
    if tp > 1:
        _apply(out[1], lambda t: t.mul_(tp))


def _chunk_end_target_guess():
    """The hook of ``chunk-end-target-guess`` (module docstring): one per process, shared by the
    target's and the draft's modules (SGLang calls the factory once per model), a stage machine over
    one prefill: the target's ``model`` (an EXTEND: the requests' row counts) -> the target's
    ``logits_processor`` (its guess per request: the greedy next token) -> the draft's
    ``model.embed_tokens`` (the draft's input ids of that prefill: the tail row of a request whose
    tail token is not the target's guess is a chunk end inside the prompt; it gets the guess)."""
    st = _CHUNK_STATE

    def hook(module, args, output):
        kind = type(module).__name__
        if kind == "LogitsProcessor":
            if st.get("stage") == "model" and getattr(output, "next_token_logits", None) is not None:
                st.update(stage="logits", guess=output.next_token_logits.argmax(-1).tolist())
            return None
        if "Embedding" in kind:
            if st.get("stage") != "logits" or not args:
                return None
            st["stage"] = None  # the call below re-enters this hook: it must do nothing
            ids, lens, guess = args[0], st.pop("lens"), st.pop("guess")
            if int(ids.shape[0]) != sum(lens) or len(guess) != len(lens):
                return None
            end, changed = 0, False
            for n, g in zip(lens, guess):
                end += n
                if n and int(ids[end - 1]) != g:
                    ids[end - 1] = g  # in place: the draft's model (and the recorder) reads these ids
                    changed = True
            return module(ids) if changed else None
        fb = args[2] if len(args) > 2 else None
        mode = getattr(getattr(fb, "forward_mode", None), "name", "")
        if not hasattr(module, "fc") and hasattr(module, "embed_tokens"):
            st.clear()
            if mode == "EXTEND":
                st.update(stage="model", lens=[n for _, n, _ in _segments(fb)])
        return None

    return hook


_CHUNK_STATE: dict[str, Any] = {}


def fault(config: dict):
    """``forward_hooks`` factory for ``config["fault"]`` (module docstring)."""
    name = str(config["fault"])
    state: dict[str, Any] = {}
    if name == "chunk-end-target-guess":
        return _chunk_end_target_guess()
    change = {"cache-hit-normed-state": _cache_hit, "batch-neighbour-rows": _neighbour,
              "tp-partial-sum": _tp_sum}.get(name) or _logprob(name, state)

    def hook(module, args, output):
        fb = args[2] if len(args) > 2 else None
        mode = getattr(getattr(fb, "forward_mode", None), "name", "")
        if hasattr(module, "fc") or mode != "EXTEND" or not isinstance(output, tuple) or len(output) != 2:
            return None
        if name == "batch-neighbour-rows" and len(_segments(fb)) < 2:
            return None
        change(fb, output)
        return None

    return hook
