"""An engine process in its own process group: reap the whole group, read its log's tail and last
error line. Shared by the engine tools that start one (:mod:`eagle3_conformance.tools.vllm_engine`; the
same logic as ``tools/sglang_engine/launch.py``, which predates this module)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

LOG_TAIL_LINES = 40


def kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 1 s, to ``proc``'s whole process group (``proc`` was started with
    ``start_new_session=True``); waits until no member is left (up to 30 s); never raises."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        if sig == signal.SIGTERM:
            time.sleep(1.0)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 20  # killed members linger until their new parent (init) reaps them
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.2)


def log_tail(path: Path, n: int = LOG_TAIL_LINES) -> str:
    """The last ``n`` lines of ``path`` ("(no log)" when unreadable)."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-n:])


def last_error(tail: str) -> str:
    """The last ``SomeError: message`` line of ``tail`` ("" when none)."""
    hits = [ln.strip() for ln in tail.splitlines() if re.match(r"^\s*[\w.]+(Error|Exception|Interrupt): ", ln)]
    return hits[-1] if hits else ""
