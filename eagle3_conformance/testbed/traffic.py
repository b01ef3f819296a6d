"""Steady generated traffic for a running server (the monitor's benchmark and its test on the real server).

Not user-facing: it stands for the production traffic ``eagle3-conformance monitor`` watches. Prompts
are drawn (seeded) from templates in a few domains, none of them the ``accept`` canary's held-out
prompts (``server_accept/prompts_v1.json``) nor the shipped draft's training corpus
(``fixtures/corpus``): the traffic is unlike both, as a deployment's is. Requests go to the server's
OpenAI-compatible ``/v1/chat/completions`` (SGLang and vLLM), greedy, from ``concurrency`` threads;
standard library only.

Domains: ``general`` (explain / compare / list questions on everyday topics, the steady mix),
``code`` (small programming tasks) and ``digits`` (lists of numbers to continue: content a draft
trained on prose predicts less well than code, the "another prompt domain" of a traffic-mix shift);
``mixed`` draws one of the three per request.
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Optional

TOPICS = ("tides", "bread baking", "bicycle gears", "volcanoes", "libraries", "recycling paper", "honey bees",
          "train timetables", "rainbows", "chess openings", "winter gardening", "lighthouses", "postal codes",
          "sourdough starters", "wind turbines", "city parks", "coral reefs", "ink printing", "rice farming",
          "weather balloons", "museum audio guides", "fountain pens", "river deltas", "school buses")
GENERAL = ("Explain how {a} work in a few sentences.", "Give three facts about {a}.",
           "Compare {a} and {b} in a short paragraph.", "Why do people care about {a}? Answer briefly.",
           "Write a short note to a friend about {a}.", "Describe a day spent learning about {a}.")
CODE = ("Write a Python function that returns the {n} largest numbers of a list.",
        "Write a Python function that counts the vowels in a string, with a docstring.",
        "Write a Python class for a {a} inventory with add and remove methods.",
        "Write a shell command that lists the {n} biggest files in a directory.",
        "Write a Python function that checks whether a number is a palindrome.")
DIGITS = ("Continue this list of numbers with twenty more: {nums}",
          "Here are some account codes: {nums}. Write twenty more codes like them.")


def prompt(domain: str, rng: random.Random) -> str:
    """One prompt of ``domain`` (``general``, ``code``, ``digits``, ``mixed``) drawn with ``rng``."""
    if domain == "mixed":
        domain = rng.choice(("general", "code", "digits"))
    a, b = rng.sample(TOPICS, 2)
    if domain == "general":
        return rng.choice(GENERAL).format(a=a, b=b)
    if domain == "code":
        return rng.choice(CODE).format(a=a, n=rng.randint(2, 9))
    if domain == "digits":
        nums = ", ".join(str(rng.randint(10000, 99999)) for _ in range(8))
        return rng.choice(DIGITS).format(nums=nums)
    raise ValueError(f"unknown domain {domain!r} (general, code, digits, mixed)")


@dataclass
class Traffic:
    """Threads sending prompts of ``domain`` to ``url`` until :meth:`stop`; ``domain`` may be changed
    while it runs (the traffic-mix shift). Counts answers, errors and completion tokens."""

    url: str
    model: str
    domain: str = "general"
    concurrency: int = 2
    max_tokens: int = 48
    seed: int = 0
    timeout: float = 600.0
    answers: int = 0
    errors: int = 0
    tokens: int = 0
    last_error: str = ""
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list = field(default_factory=list)

    def start(self) -> "Traffic":
        for i in range(self.concurrency):
            t = threading.Thread(target=self._worker, args=(random.Random(self.seed * 1000 + i),), daemon=True,
                                 name=f"traffic-{i}")
            t.start()
            self._threads.append(t)
        return self

    def _worker(self, rng: random.Random) -> None:
        while not self._stop.is_set():
            body = {"model": self.model, "messages": [{"role": "user", "content": prompt(self.domain, rng)}],
                    "temperature": 0.0, "max_tokens": self.max_tokens}
            req = urllib.request.Request(self.url.rstrip("/") + "/v1/chat/completions", json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as r:
                    ans = json.loads(r.read())
                with self._lock:
                    self.answers += 1
                    self.tokens += int((ans.get("usage") or {}).get("completion_tokens") or 0)
            except Exception as e:  # noqa: BLE001 -- a restarting server refuses; counted, retried after a pause
                with self._lock:
                    self.errors += 1
                    self.last_error = f"{type(e).__name__}: {e}"
                self._stop.wait(2.0)

    def counts(self) -> tuple[int, int, int]:
        """(answers, tokens, errors) so far."""
        with self._lock:
            return self.answers, self.tokens, self.errors

    def stop(self, join: Optional[float] = 5.0) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(join)


def served_model(url: str, timeout: float = 10.0) -> str:
    """The model id ``/v1/models`` names (what requests must say)."""
    with urllib.request.urlopen(url.rstrip("/") + "/v1/models", timeout=timeout) as r:
        return str(json.loads(r.read())["data"][0]["id"])


def wait_ready(url: str, timeout: float, proc=None) -> float:
    """Seconds until ``url/health`` answers 200 (``proc``: fail early when it exits).

    Raises:
        TimeoutError: not within ``timeout``; RuntimeError: ``proc`` exited.
    """
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode})")
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=5) as r:
                if r.status == 200:
                    return time.time() - t0
        except OSError:
            pass
        time.sleep(2)
    raise TimeoutError(f"{url}/health did not answer within {timeout:g} s")
