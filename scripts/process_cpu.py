"""CPU seconds of a process tree, by kind of process (``scripts/main_job.py`` with
``CONFORMANCE_MAIN_JOB_PROFILE=1``; issue 42 item 4: where the main job's CPU goes).

``os.wait4`` gives each command's CPU with everything it waited for, but not which of its processes
spent it: the suite's own pytest process, or the real engines' processes it starts (each engine start
is a driver that imports SGLang, and SGLang's scheduler, detokenizer and multiprocessing's resource
tracker, each a fresh interpreter). :class:`TreeSampler` reads ``/proc/<pid>/stat`` of every descendant
of a process every ``interval`` seconds and keeps each process's last CPU seconds (user + system,
``utime + stime`` in clock ticks, ``man 5 proc``); :func:`by_kind` adds them up per kind. A process that
lives less than one interval may be missed, and the last ``interval`` of each is not seen: the figures
are a lower bound, within about ``interval`` seconds per process. Linux only (``/proc``); elsewhere
:meth:`TreeSampler.start` does nothing and :meth:`TreeSampler.report` says so.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

PROC = Path("/proc")

#: (kind, what the process's command line contains), the first match wins; anything else is "other"
KINDS = (
    ("engine resource tracker", "multiprocessing.resource_tracker"),
    ("engine scheduler", "sglang::scheduler"),
    ("engine detokenizer", "sglang::detokenizer"),
    ("engine driver", "eagle3_conformance.tools.sglang_engine.driver"),
    ("kill matrices", "eagle3-conformance faults"),
    ("specforge contract's pytest", "--conformance-paths specforge"),
    ("suite's pytest", "-m pytest"),
)


def kind(cmdline: str) -> str:
    """The kind of a process (:data:`KINDS`) from its command line (arguments joined by spaces)."""
    return next((k for k, needle in KINDS if needle in cmdline), "other")


def _stat(pid: int) -> tuple[int, float]:
    """(parent pid, CPU seconds) of ``pid`` from ``/proc/<pid>/stat`` (fields 4, 14 and 15)."""
    text = (PROC / str(pid) / "stat").read_text()
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cmdline(pid: int) -> str:
    return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()


class TreeSampler:
    """Samples the CPU seconds of every descendant of ``root`` (default: this process) in a daemon thread."""

    def __init__(self, root: int | None = None, interval: float = 0.5) -> None:
        self.root = os.getpid() if root is None else root
        self.interval = interval
        self.seen: dict[int, tuple[str, float]] = {}  # pid -> (command line, last CPU seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="process-cpu", daemon=True)

    def start(self) -> "TreeSampler":
        if PROC.is_dir():
            self._thread.start()
        return self

    def sample(self) -> None:
        """One pass: every process under ``root`` now, its command line (a process may rename itself, as
        SGLang's do) and its CPU seconds."""
        parents: dict[int, tuple[int, float]] = {}
        for entry in PROC.iterdir():
            if entry.name.isdigit():
                try:
                    parents[int(entry.name)] = _stat(int(entry.name))
                except (OSError, ValueError, IndexError):
                    continue  # gone meanwhile
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in parents.items():
            children.setdefault(ppid, []).append(pid)
        todo = list(children.get(self.root, []))
        while todo:
            pid = todo.pop()
            todo += children.get(pid, [])
            try:
                cmd = _cmdline(pid) or self.seen.get(pid, ("", 0.0))[0]
            except OSError:
                continue
            self.seen[pid] = (cmd, parents[pid][1])

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def report(self) -> str:
        """One line: the CPU seconds per kind, largest first, and how many processes of each."""
        if not PROC.is_dir():
            return "CPU by process: not measured (no /proc on this system)"
        parts = [f"{k} {sec:.0f} s ({n})" for k, (sec, n) in by_kind(self.seen.values())]
        return f"CPU by process (sampled every {self.interval:g} s, a lower bound): " + ", ".join(parts)


def by_kind(processes) -> list[tuple[str, tuple[float, int]]]:
    """[(kind, (CPU seconds, number of processes))], largest first, from (command line, CPU seconds) pairs."""
    out: dict[str, tuple[float, int]] = {}
    for cmd, sec in processes:
        total, n = out.get(kind(cmd), (0.0, 0))
        out[kind(cmd)] = (total + sec, n + 1)
    return sorted(out.items(), key=lambda kv: -kv[1][0])
