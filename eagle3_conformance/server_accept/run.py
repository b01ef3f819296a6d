"""The prompts against one server: bounded concurrency, a timeout per request and for the whole run.

Daemon threads, not processes: each request waits on the server, and a thread still waiting when the
run ends (its first failure, or the whole-run timeout) never keeps the program from exiting. No
retries (a retry would hide a server that drops requests): the first failed request ends the run with
its error.
"""

from __future__ import annotations

import queue
import threading
import time
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
            finish within ``run_timeout`` (how many answers were missing, and the first of them).
    """
    adapter.sequential = concurrency == 1
    todo: "queue.Queue[int]" = queue.Queue()
    for i in range(len(prompts)):
        todo.put(i)
    results: dict[int, PromptResult] = {}
    errors: list[BaseException] = []
    cond = threading.Condition()

    def worker():
        while not errors:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            try:
                r = adapter.measure(prompts[i], max_tokens, request_timeout)
            except BaseException as e:  # reported by the caller's thread, never swallowed
                with cond:
                    errors.append(e)
                    cond.notify_all()
                return
            with cond:
                results[i] = r
                cond.notify_all()

    t0 = time.perf_counter()
    for _ in range(min(concurrency, len(prompts))):
        threading.Thread(target=worker, daemon=True, name="accept").start()
    deadline = t0 + run_timeout
    with cond:
        while not errors and len(results) < len(prompts) and time.perf_counter() < deadline:
            cond.wait(timeout=max(0.0, min(1.0, deadline - time.perf_counter())))
        if errors:
            raise errors[0]
        if len(results) < len(prompts):
            first = next(p.id for i, p in enumerate(prompts) if i not in results)
            raise ServerError(f"{adapter.info.url}: the run did not finish within --run-timeout {run_timeout:g} s: "
                              f"{len(prompts) - len(results)} of {len(prompts)} prompts unanswered (first: {first})")
    return RunResult([results[i] for i in range(len(prompts))], time.perf_counter() - t0, concurrency, max_tokens)
