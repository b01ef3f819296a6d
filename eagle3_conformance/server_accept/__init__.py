"""Acceptance of a deployed speculative-decoding server (issue 34): ``eagle3-conformance accept``.

A running server (SGLang's native HTTP server, or vLLM's OpenAI server) is sent a fixed, versioned
held-out prompt set through its own chat template, greedily; its own per-request acceptance counters
are read back and turned into figures with an interval over prompts, and compared with a recorded
baseline on the same prompts. Nothing is launched here and nothing about the server is patched: only
its public HTTP API is used. Standard library only (``urllib``, threads): no torch, no engine.

- :mod:`.http`: JSON over HTTP with a timeout per request, no retries; errors name the request and
  the server's words;
- :mod:`.prompts`: the shipped prompt set (``prompts_v1.json``) and its CI subsets;
- :mod:`.sglang`, :mod:`.vllm`: one adapter per server kind (identity, flags, per-request counters);
  :func:`connect` picks the adapter the server answers to;
- :mod:`.run`: the prompts with bounded concurrency and a whole-run timeout;
- :mod:`.figures`: mean accept length, per-position acceptance, bootstrap intervals, tokens/s;
- :mod:`.baseline`: the ``--record`` file, its compatibility with a run, and the paired comparison.
"""

from __future__ import annotations

from eagle3_conformance.server_accept.http import ServerError


def connect(url: str, timeout: float = 30.0):
    """The adapter for the server at ``url``: SGLang when it answers ``/server_info`` (or the
    deprecated ``/get_server_info``) with its server args, else vLLM when it answers ``/version``
    and ``/v1/models``.

    Raises:
        ServerError: nothing answers at ``url``, or it answers as neither (the message says what it said).
    """
    from eagle3_conformance.server_accept import sglang, vllm

    probes = []
    for kind in (sglang, vllm):
        adapter = kind.probe(url, timeout)
        if isinstance(adapter, str):
            probes.append(adapter)
            continue
        return adapter
    raise ServerError(f"{url}: not an SGLang or vLLM server ({'; '.join(probes)})")


__all__ = ["ServerError", "connect"]
