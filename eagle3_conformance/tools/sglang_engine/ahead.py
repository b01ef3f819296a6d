"""A run started ahead of its turn: :class:`Job` runs a function that starts engine processes
(:func:`.launch.run_engine`, or :func:`.variations.run_variations`, several engine runs started together)
in a background thread, so the engines' start and generation (their own processes) overlap the work that
runs before the result is needed. The run is the same call with the same arguments; only when it starts
changes. The caller takes the result (or the run's error) with :meth:`Job.result`, or cancels the job, which
kills every engine's whole process group (every later one too, as it starts): a job never outlives its process.
:class:`EngineJob` is the job of one :func:`.launch.run_engine` call."""

from __future__ import annotations

import atexit
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Generic, Optional, TypeVar

from eagle3_conformance.environment.procgroup import kill_group
from eagle3_conformance.tools.sglang_engine.launch import EngineRun, run_engine

T = TypeVar("T")


class Job(Generic[T]):
    """``fn(*args, workdir=<a new temp dir>, started=<callback>, **kw)`` running in a background thread.
    ``fn`` hands every engine process it starts to ``started`` (as :func:`.launch.run_engine` does; several
    may run at once, from ``fn``'s own threads), so :meth:`cancel` can kill each (a shared engine's
    :class:`.shared.Handle` withdraws instead: the engine is killed when no member is left).

    Attributes:
        workdir: the run's folder (spec, log, records); the caller removes it (:meth:`discard`).
    """

    def __init__(self, fn: Callable[..., T], *args: Any, **kw: Any) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="sglang-engine-"))
        self._procs: list[subprocess.Popen] = []
        self._cancelled = False
        self._lock = threading.Lock()
        self._run: Optional[T] = None
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._main, args=(fn, args, kw), name="sglang-engine-ahead",
                                        daemon=True)
        atexit.register(self.discard)  # an interpreter that exits first still kills the engine
        self._thread.start()

    def _started(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.append(proc)
            cancelled = self._cancelled
        if cancelled:
            _stop(proc)

    def _main(self, fn, args, kw) -> None:
        try:
            self._run = fn(*args, workdir=self.workdir, started=self._started, **kw)
        except BaseException as e:  # noqa: BLE001 - handed to the caller by result()
            self._error = e

    def result(self) -> T:
        """The run's result, once it is over (waits for it).

        Raises:
            whatever ``fn`` raised (EngineStartError / EngineRunError for :func:`.launch.run_engine`).
        """
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._run is not None
        return self._run

    def cancel(self) -> None:
        """Kill each engine's process group that still runs (and any ``fn`` starts later, as it starts),
        and wait for the thread (never raises)."""
        with self._lock:
            self._cancelled = True
            procs = list(self._procs)
        for proc in procs:
            if proc.poll() is None:
                _stop(proc)
        self._thread.join(timeout=60)

    def discard(self) -> None:
        """:meth:`cancel`, then remove the run's folder."""
        self.cancel()
        shutil.rmtree(self.workdir, ignore_errors=True)
        atexit.unregister(self.discard)


class EngineJob(Job[EngineRun]):
    """``run_engine(target_dir, draft_dir, prompts, workdir=<a new temp dir>, **kw)`` running in a
    background thread (:class:`Job`)."""

    def __init__(self, target_dir, draft_dir, prompts: list[list[int]], **kw: Any) -> None:
        super().__init__(_run_engine, target_dir, draft_dir, prompts, **kw)


def _stop(proc) -> None:
    """Kill an engine's process group; a shared engine's member (:class:`.shared.Handle`) withdraws instead
    (the engine is killed when no member is left)."""
    cancel = getattr(proc, "cancel", None)
    if cancel is not None:
        cancel()
    else:
        kill_group(proc)


def _run_engine(*args: Any, **kw: Any) -> EngineRun:
    return run_engine(*args, **kw)  # looked up at call time (tests replace it)
