"""Start the driver (:mod:`.driver`) in its own process group, bound it in time, always reap it,
and remove what vLLM leaves behind from this run only.

vLLM's CPU engine runs three processes (the driver with ``LLM``, ``EngineCore``, the worker); all are
in the driver's process group, which is SIGTERMed then SIGKILLed afterwards, whatever happened.
Leftovers (docs/vllm-engine.md):

* ``/tmp/vllm_dist_<uuid>`` (``vllm/utils/network_utils.py:154``, ``tempfile.gettempdir()``) and the
  engine's ZMQ ``ipc://`` sockets: the driver gets ``TMPDIR`` = a fresh short directory of its own
  (:func:`run_tmpdir`, under ``/tmp``: a socket path over ~107 characters fails with ``ZMQError``, as
  it did under pytest's ``tmp_path``), removed after the run;
* ``/dev/shm/psm_*`` (torch shared memory of the engine's processes): removed after the group is
  gone when they appeared during this run and no live process holds them open
  (:func:`remove_shm_leftovers`), so another user's engine running at the same time keeps its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from eagle3_conformance.environment.procgroup import kill_group as _kill_group
from eagle3_conformance.environment.procgroup import last_error as _last_error
from eagle3_conformance.environment.procgroup import log_tail as _tail

PROJECT_ROOT = Path(__file__).resolve().parents[3]
SHM = Path("/dev/shm")


class EngineError(RuntimeError):
    """vLLM failed; ``reason`` says why (vLLM's own error line), ``log_tail`` is the end of its log."""

    def __init__(self, reason: str, log_tail: str) -> None:
        super().__init__(f"{reason}\n--- vLLM log (last lines) ---\n{log_tail}")
        self.reason, self.log_tail = reason, log_tail


class EngineStartError(EngineError):
    """``vllm.LLM`` did not start (a draft config vLLM refuses, a wrong draft, a timeout)."""


class EngineRunError(EngineError):
    """The engine started but generation failed, died, or ran over its timeout."""


@dataclass
class EngineRun:
    """One engine run.

    Attributes:
        outputs: per prompt (in prompt order) ``{"request_id", "output_ids", "finish_reason",
            "spec_decode_metrics": {"histogram", "num_draft_tokens", "per_step_accepted", ...}}``.
        metrics: vLLM's ``vllm:spec_decode_*`` counters (``LLM.get_metrics()``).
        applied: what the worker applied (:func:`.hooks.install`: ``aux_layers``, ``num_layers``, ...).
        timings: seconds: ``start_s``, ``generate_s``, ``shutdown_s``, ``wall_s``.
        records_dir: the hook records (None when not observed).
        vllm_version: ``vllm.__version__`` in the engine.
    """

    outputs: list[dict[str, Any]]
    metrics: dict[str, Any]
    applied: dict[str, Any]
    timings: dict[str, float]
    records_dir: Optional[Path]
    vllm_version: str
    log_tail: str = ""
    spec: dict[str, Any] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)


def child_env(tmp: Path, device: str) -> dict[str, str]:
    """The driver's environment: the project importable in every vLLM process, callables allowed
    through ``collective_rpc``, ``TMPDIR`` of the run; on CPU a 1 GiB KV cache."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    env["TMPDIR"] = str(tmp)
    env.setdefault("OMP_NUM_THREADS", "1")
    if device == "cpu":
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return env


def run_tmpdir() -> Path:
    """A new short directory for one run's ``TMPDIR`` (under ``/tmp`` whatever ``TMPDIR`` says)."""
    return Path(tempfile.mkdtemp(prefix="vllm-t-", dir="/tmp" if Path("/tmp").is_dir() else None))


def _held_open() -> set[str]:
    held = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            for fd in fd_dir.iterdir():
                target = os.readlink(fd)
                if target.startswith("/dev/shm/"):
                    held.add(target)
        except OSError:
            continue
    return held


def remove_shm_leftovers(before: set[str]) -> list[str]:
    """Remove ``/dev/shm/psm_*`` files that are not in ``before`` and that no process holds open
    (and memory maps count as held: ``/proc/*/maps`` is checked too). Returns the paths removed."""
    new = [p for p in SHM.glob("psm_*") if p.name not in before]
    if not new:
        return []
    held = _held_open()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            held |= {ln.split()[-1] for ln in maps.read_text().splitlines() if "/dev/shm/" in ln}
        except OSError:
            continue
    removed = []
    for p in new:
        if str(p) not in held:
            try:
                p.unlink()
                removed.append(str(p))
            except OSError:
                pass
    return removed


def root_cause(log: Path) -> str:
    """The first ``SomeError: message`` line an engine process (``EngineCore`` or ``Worker``) logged:
    vLLM's own reason, which the driver sees only as "Engine core initialization failed" or
    ``EngineDeadError``."""
    import re

    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for ln in lines:
        if "(EngineCore" in ln or "(Worker" in ln:
            m = re.search(r"\] ((?:[\w.]+)(?:Error|Exception): .*)$", ln)
            if m and "Engine core initialization failed" not in m.group(1):
                return m.group(1).strip()[:400]
    return ""


def run_engine(target_dir, draft_dir, prompts: list[list[int]], *, device: str = "cpu", dtype: str = "float32",
               max_new_tokens: int = 32, num_spec_tokens: int = 3, observe: bool = True, residual: bool = True,
               start_timeout: float = 420, generate_timeout: float = 300, workdir: Optional[Path] = None,
               llm_extra: Optional[dict] = None, phases: Optional[list[dict]] = None,
               faults: tuple[str, ...] = ()) -> EngineRun:
    """Start the real ``vllm.LLM`` with EAGLE-3 (a chain of ``num_spec_tokens`` drafts), generate greedily
    for ``prompts`` (token ids) in one batch, shut down; the driver's process group is killed
    afterwards and this run's leftovers removed.

    Args:
        observe: register :mod:`.hooks` (records in ``workdir/records``); ``residual``: with B_0..B_L.
        workdir: spec, result, log and records (default: a new temp dir left for
            the caller; :func:`eagle3_conformance.tools.vllm_engine.observe_engine` removes its own).
        llm_extra: more ``vllm.LLM`` keyword arguments (what a user passes to the server).
        phases: instead of one batch of ``prompts``, the driver's phases in order (:func:`.driver.run_phases`:
            each ``{"name", "prompts", "rids", "alone", "flush", "flush_each", "options"}``; the invariance runs).
        faults: in-worker faults (:mod:`.fault_hooks`) installed through ``collective_rpc`` before the hooks.

    Raises:
        EngineStartError: vLLM did not start (its reason and log tail).
        EngineRunError: generation failed or a timeout expired.
    """
    import shutil

    work = Path(workdir or tempfile.mkdtemp(prefix="vllm-engine-"))
    work.mkdir(parents=True, exist_ok=True)
    tmp = run_tmpdir()
    records = work / "records" if observe else None
    spec = dict(target_dir=str(target_dir), draft_dir=str(draft_dir), prompts=[list(map(int, p)) for p in prompts],
                device=device, dtype=dtype, max_new_tokens=max_new_tokens, num_spec_tokens=num_spec_tokens,
                start_timeout=start_timeout, generate_timeout=generate_timeout, result=str(work / "result.json"),
                records=str(records) if records else None, residual=residual, llm_extra=llm_extra or {},
                tmpdir=str(tmp), phases=phases, faults=list(faults))
    (work / "spec.json").write_text(json.dumps(spec))
    before = {p.name for p in SHM.glob("psm_*")}
    log, t0, limit = work / "engine.log", time.perf_counter(), start_timeout + generate_timeout + 90
    with open(log, "wb") as lf:
        proc = subprocess.Popen([sys.executable, "-m", "eagle3_conformance.tools.vllm_engine.driver",
                                 str(work / "spec.json")], stdout=lf, stderr=subprocess.STDOUT, cwd=str(work),
                                env=child_env(tmp, device), start_new_session=True)
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            _kill_group(proc)
            shutil.rmtree(tmp, ignore_errors=True)
    removed = remove_shm_leftovers(before)
    wall = time.perf_counter() - t0
    res = json.loads((work / "result.json").read_text()) if (work / "result.json").is_file() else {}
    tail = _tail(log)
    if code is None:
        raise EngineRunError(f"the vLLM engine process ran past {limit:.0f} s and was killed", tail)
    if code != 0 or "outputs" not in res:
        reason = res.get("error") or _last_error(tail) or f"the engine process exited with status {code}"
        cause = root_cause(log)
        if cause and cause not in reason:
            reason = f"{reason} (vLLM's root cause: {cause})"
        if res.get("phase", "start") == "start":
            raise EngineStartError(f"vllm.LLM did not start: {reason}", tail)
        raise EngineRunError(f"vllm.LLM generation failed: {reason}", tail)
    return EngineRun(res["outputs"], res.get("metrics", {}), res.get("applied", {}),
                     {**res.get("timings", {}), "wall_s": wall}, records, res.get("vllm_version", ""), tail, spec,
                     removed)
