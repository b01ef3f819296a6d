"""An engine run started ahead of its turn (:class:`EngineJob`): :func:`.launch.run_engine` in a
background thread, so the engine's start and generation (its own processes) overlap the work that runs
before the result is needed. The run is the same call with the same arguments; only when it starts
changes. The caller takes the :class:`.launch.EngineRun` (or the run's error) with :meth:`EngineJob.result`,
or cancels the job, which kills the engine's whole process group: a job never outlives its process."""

from __future__ import annotations

import atexit
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, Optional

from eagle3_conformance.environment.procgroup import kill_group
from eagle3_conformance.tools.sglang_engine.launch import EngineRun, run_engine


class EngineJob:
    """``run_engine(target_dir, draft_dir, prompts, workdir=<a new temp dir>, **kw)`` running in a
    background thread.

    Attributes:
        workdir: the run's folder (spec, log, records); the caller removes it (:meth:`discard`).
    """

    def __init__(self, target_dir, draft_dir, prompts: list[list[int]], **kw: Any) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="sglang-engine-"))
        self._proc: Optional[subprocess.Popen] = None
        self._cancelled = False
        self._lock = threading.Lock()
        self._run: Optional[EngineRun] = None
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._main, args=(target_dir, draft_dir, prompts, kw),
                                        name="sglang-engine-ahead", daemon=True)
        atexit.register(self.discard)  # an interpreter that exits first still kills the engine
        self._thread.start()

    def _started(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._proc = proc
            cancelled = self._cancelled
        if cancelled:
            kill_group(proc)

    def _main(self, target_dir, draft_dir, prompts, kw) -> None:
        try:
            self._run = run_engine(target_dir, draft_dir, prompts, workdir=self.workdir, started=self._started, **kw)
        except BaseException as e:  # noqa: BLE001 - handed to the caller by result()
            self._error = e

    def result(self) -> EngineRun:
        """The run, once it is over (waits for it).

        Raises:
            EngineStartError / EngineRunError: as :func:`.launch.run_engine` raised them.
        """
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._run is not None
        return self._run

    def cancel(self) -> None:
        """Kill the engine's process group if it still runs, and wait for the thread (never raises)."""
        with self._lock:
            self._cancelled = True
            proc = self._proc
        if proc is not None and proc.poll() is None:
            kill_group(proc)
        self._thread.join(timeout=60)

    def discard(self) -> None:
        """:meth:`cancel`, then remove the run's folder."""
        self.cancel()
        shutil.rmtree(self.workdir, ignore_errors=True)
        atexit.unregister(self.discard)
