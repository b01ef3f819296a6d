"""The project's SmolLM2 pair on SGLang 0.5.23's real HTTP server, for the monitor's benchmark and its
test on the real server: ``python -m eagle3_conformance.serving.serve -- <launch_server args>`` (the CPU
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


def seed_draft(out: Path, src: Path) -> Path:
    """A copy of the draft at ``src`` with the seed incident in its config: ``eagle_aux_hidden_state_layer_ids``
    ``[-1, 1, 14]``, which SGLang's llama rule (+1) reads as B_0, B_2, B_15: the embedding in slot 0. The
    weights are a symlink."""
    import json

    d = Path(out) / "seed-draft"
    d.mkdir(parents=True, exist_ok=True)
    if not (d / "model.safetensors").exists():
        (d / "model.safetensors").symlink_to(Path(src) / "model.safetensors")
    cfg = json.loads((Path(src) / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [-1, 1, 14]
    (d / "config.json").write_text(json.dumps(cfg))
    return d
