"""The prompts against one server: bounded concurrency, a timeout per request and for the whole run.

Threads, not processes: each request waits on the server. No retries (a retry would hide a server
that drops requests): the first failed request ends the run with its error, and the requests still
in flight are left to their own timeouts.
"""

from __future__ import annotations

import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Sequence

from eagle3_conformance.server_accept.http import ServerError
from eagle3_conformance.server_accept.result import PromptResult


@dataclass
class RunResult:
    """One run: per-prompt results in the prompts' order, and its wall time (first request sent to last
    answer received), in seconds."""

    results: list[PromptResult]
    wall_s: float
    concurrency: int
    max_tokens: int


def run_prompts(adapter, prompts: Sequence, *, max_tokens: int, concurrency: int, request_timeout: float,
                run_timeout: float) -> RunResult:
    """Send every prompt (greedy, ``max_tokens`` new tokens at most) with at most ``concurrency`` in flight.

    Args:
        adapter: :class:`~.sglang.SGLangServer` or :class:`~.vllm.VLLMServer`.
        request_timeout: seconds per request; run_timeout: seconds for the whole run.

    Raises:
        ServerError: a request failed (the first one, in the server's words), or the run did not
            finish within ``run_timeout`` (how many answers were missing).
    """
    adapter.sequential = concurrency == 1
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="accept")
    t0 = time.perf_counter()
    try:
        futs = [pool.submit(adapter.measure, p, max_tokens, request_timeout) for p in prompts]
        done, pending = wait(futs, timeout=run_timeout, return_when=FIRST_EXCEPTION)
        failed = [f for f in futs if f in done and f.exception() is not None]
        if failed:
            raise failed[0].exception()
        if pending:
            raise ServerError(f"{adapter.info.url}: the run did not finish within --run-timeout {run_timeout:g} s: "
                              f"{len(pending)} of {len(futs)} prompts unanswered "
                              f"(first: {next(p.id for p, f in zip(prompts, futs) if f in pending)})")
        wall = time.perf_counter() - t0
        return RunResult([f.result() for f in futs], wall, concurrency, max_tokens)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
