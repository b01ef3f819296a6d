"""speculators 0.9.0's offline data pipeline, run as a user runs it, against :mod:`.server`.

1. ``speculators prepare-data --model T --data CONVS.jsonl --render-endpoint URL --output DATA``: the
   conversations are rendered by the server's ``/v1/chat/completions/render`` and turned into the Arrow
   dataset (``input_ids``, ``loss_mask``, ``seq_len``) by speculators' own preprocessing.
2. ``speculators generate-offline-data --endpoint URL/v1 --preprocessed-data DATA --fail-on-error
   --validate-outputs``: one ``max_tokens=1`` completion per row; vLLM's hidden-states connector writes
   ``{req_id}.safetensors`` (``hidden_states`` [T, N, H] in the served dtype, ``token_ids`` [T]) and the
   generator moves it to ``DATA/hidden_states/hs_{i}.safetensors``.

Both are speculators' own command lines in subprocesses (``python -m speculators``), each with a timeout
and its own process group. ``--fail-on-error``: a connector error kills vLLM's engine, and without it the
generator would skip samples and exit 0.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from eagle3_conformance.tools.specgen.server import ExtractionServer, kill_group

LOG_TAIL_CHARS = 3000


class PipelineError(RuntimeError):
    """A speculators command failed or ran over its timeout; the message ends with its output's tail."""


@dataclass
class PipelineRun:
    """What one run wrote and how long it took.

    Attributes:
        data_dir: the dataset (Arrow table + ``hidden_states/hs_{i}.safetensors``).
        prepare_s, generate_s: wall seconds of ``prepare-data`` and ``generate-offline-data``.
        samples: number of Arrow rows.
        generate_log: the generator's combined output.
        request_ms: the generator's own "avg vLLM request" figure (ms per sample), None if not logged.
    """

    data_dir: Path
    prepare_s: float
    generate_s: float
    samples: int
    generate_log: str
    request_ms: Optional[float] = None


def write_conversations(path: Path, exchanges: Sequence[tuple[str, str]]) -> Path:
    """Write ``(user, assistant)`` pairs as speculators' ``conversations`` JSONL (one row each)."""
    with open(path, "w", encoding="utf-8") as f:
        for user, assistant in exchanges:
            conv = [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
            f.write(json.dumps({"conversations": conv}) + "\n")
    return path


def _run(cmd: list[str], timeout: float, what: str, env: dict) -> tuple[str, float]:
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, start_new_session=True, text=True, errors="replace")
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc, grace_s=5)
        out = proc.stdout.read() if proc.stdout else ""
        raise PipelineError(f"{what} ran over {timeout:.0f} s\n--- output (tail) ---\n{out[-LOG_TAIL_CHARS:]}") from None
    if proc.returncode != 0:
        raise PipelineError(f"{what} exited with status {proc.returncode}\n--- output (tail) ---\n"
                            f"{out[-LOG_TAIL_CHARS:]}")
    return out, time.monotonic() - t0


def run(server: ExtractionServer, model: str | Path, conversations: Path, data_dir: Path, *,
        seq_length: int = 512, timeout: float = 600) -> PipelineRun:
    """``prepare-data`` then ``generate-offline-data`` against ``server``; ``data_dir`` must not exist.

    Raises:
        FileExistsError: ``data_dir`` exists (never overwritten).
        PipelineError: a command failed or timed out (the server's death included: the generator then
            fails on the connection).
    """
    data_dir = Path(data_dir)
    if data_dir.exists():
        raise FileExistsError(f"{data_dir} exists; refusing to overwrite")
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), COLUMNS="200")
    spec = [sys.executable, "-m", "speculators"]
    _, prep_s = _run(spec + ["prepare-data", "--model", str(model), "--data", str(conversations),
                             "--output", str(data_dir), "--render-endpoint", server.url,
                             "--seq-length", str(seq_length), "--num-preprocessing-workers", "1"],
                     timeout, "speculators prepare-data", env)
    log, gen_s = _run(spec + ["generate-offline-data", "--endpoint", f"{server.url}/v1", "--preprocessed-data",
                              str(data_dir), "--concurrency", "1", "--fail-on-error", "--validate-outputs"],
                      timeout, "speculators generate-offline-data", env)
    from datasets import load_from_disk

    n = len(load_from_disk(str(data_dir)))
    # generate_offline_data.py's own timing line (rich's handler may wrap it)
    m = re.search(r"avg\s+vLLM\s+request\s+(\d+(?:\.\d+)?)\s+ms", log)
    return PipelineRun(data_dir, prep_s, gen_s, n, log, float(m.group(1)) if m else None)
