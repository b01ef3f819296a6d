"""SGLang's native HTTP server: identity from ``/server_info``, per-request counters from ``meta_info``.

Requests go to ``POST /v1/chat/completions`` with ``return_meta_info: true`` (SGLang 0.5.23
``srt/entrypoints/openai/protocol.py:964``, copied into ``choices[i].meta_info`` by
``serving_chat.py:2985-2987``): the server applies its own chat template, and the answer carries the
same per-request ``meta_info`` as the native ``/generate`` (``completion_tokens``, ``spec_verify_ct``,
``spec_accept_length``, ``spec_correct_drafts_histogram``, written by
``managers/tokenizer_manager.py:3138-3207``). ``/generate`` takes text or token ids and applies no
chat template, so using it would mean tokenizing with a tokenizer this client would have to load:
the chat endpoint needs nothing but the server. ``spec_accept_length`` is ``completion_tokens /
spec_verify_ct`` (``tokenizer_manager.py:3165-3167``), the token sampled at prefill included.
"""

from __future__ import annotations

import time
from typing import Any, Union

from eagle3_conformance.server_accept.http import ServerError, Unreachable, request
from eagle3_conformance.server_accept.result import NoSpeculation, PromptResult, ServerInfo, per_pos_from_histogram

FLAG_KEYS = ("speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps", "speculative_eagle_topk",
             "speculative_num_draft_tokens", "dtype", "device", "attention_backend", "disable_cuda_graph",
             "cuda_graph_max_bs", "tp_size", "launch_command")
"""``/server_info`` fields a baseline records (those that change acceptance or say how it was served)."""


class SGLangNoSpeculation(ServerError, NoSpeculation):
    pass


def probe(url: str, timeout: float) -> Union["SGLangServer", str]:
    """The adapter when ``url`` is an SGLang server, else why not (a string).

    Raises:
        ServerError: nothing answers at ``url`` (connection refused, timeout).
        SGLangNoSpeculation: an SGLang server without a speculative algorithm.
    """
    info, why = None, ""
    for ep in ("/server_info", "/get_server_info"):
        try:
            info = request("GET", url.rstrip("/") + ep, timeout=timeout, what="server identity")
            break
        except Unreachable:
            raise
        except ServerError as e:
            why = str(e)
    if not isinstance(info, dict) or "model_path" not in info:
        return f"not SGLang: {why if info is None else '/server_info has no model_path'}"
    return SGLangServer(url.rstrip("/"), info)


def _flags(info: dict) -> dict[str, Any]:
    out = {k: info.get(k) for k in FLAG_KEYS if k in info}
    cg = info.get("cuda_graph_config")
    if isinstance(cg, dict):  # 0.5.23: per-phase backends ("disabled" on CPU)
        out["cuda_graph_backends"] = {ph: (v or {}).get("backend") for ph, v in cg.items() if isinstance(v, dict)}
    return out


class SGLangServer:
    """An SGLang server (see the module docstring)."""

    def __init__(self, url: str, raw: dict[str, Any]) -> None:
        algo = raw.get("speculative_algorithm")
        if not algo:
            raise SGLangNoSpeculation(
                f"{url}: the server runs without speculative decoding (server_info speculative_algorithm = "
                f"{algo!r}): there is no acceptance to measure; launch it with --speculative-algorithm EAGLE3 "
                "--speculative-draft-model-path DRAFT")
        k = int(raw.get("speculative_num_steps") or 0)
        if k < 1:
            raise ServerError(f"{url}: server_info speculative_num_steps = {raw.get('speculative_num_steps')!r}: "
                              "cannot tell how many draft positions a verify step has")
        self.info = ServerInfo("sglang", url, str(raw.get("version", "unknown")), str(raw["model_path"]),
                               str(raw.get("served_model_name") or raw["model_path"]),
                               raw.get("speculative_draft_model_path"), str(algo), k, _flags(raw))
        self.sequential = False  # requests are attributed by meta_info, never by counters

    def measure(self, prompt, max_tokens: int, timeout: float) -> PromptResult:
        """One prompt, greedy, through the server's chat template; its ``meta_info`` counters.

        Raises:
            ServerError: the request failed, or the answer has no per-request ``meta_info`` (a server
                without ``return_meta_info``), or counters that contradict each other.
        """
        body = {"model": self.info.served_name, "messages": list(prompt.messages), "temperature": 0.0,
                "max_tokens": int(max_tokens), "stream": False, "return_meta_info": True}
        what = f"prompt {prompt.id}"
        t0 = time.perf_counter()
        ans = request("POST", self.info.url + "/v1/chat/completions", body, timeout=timeout, what=what)
        dt = time.perf_counter() - t0
        try:
            meta = ans["choices"][0]["meta_info"]
        except (KeyError, IndexError, TypeError):
            meta = None
        if not isinstance(meta, dict):
            raise ServerError(f"{what}: the answer of {self.info.url}/v1/chat/completions has no choices[0].meta_info "
                              f"(SGLang {self.info.version} ignored return_meta_info): per-request counters unavailable")
        return self._result(prompt.id, meta, dt)

    def _result(self, pid: str, meta: dict, seconds: float) -> PromptResult:
        comp = int(meta.get("completion_tokens") or 0)
        steps = int(meta.get("spec_verify_ct") or 0)  # absent when no verify step ran (tokenizer_manager.py:3151)
        hist = [int(c) for c in meta.get("spec_correct_drafts_histogram") or []]
        k = self.info.k
        try:
            per_pos = per_pos_from_histogram(hist, k) if hist else [0] * k
        except ValueError as e:
            raise ServerError(f"prompt {pid}: {e} (speculative_num_steps {k})") from None
        if hist and sum(hist) != steps:
            raise ServerError(f"prompt {pid}: spec_correct_drafts_histogram {hist} counts {sum(hist)} verify steps, "
                              f"spec_verify_ct says {steps}")
        return PromptResult(pid, comp, steps, comp if steps else 0, per_pos, hist or None, seconds, "meta_info")
