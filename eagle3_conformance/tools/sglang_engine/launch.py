"""Start the driver (:mod:`.driver`) in its own process group and always reap it.

The environment of the recipe (docs/REFERENCE.md section 4.1, config B) is set here for the driver
and, through the environment and ``site/sitecustomize.py``, for every process SGLang spawns:

* ``PYTHONPATH`` = this package's ``site/`` dir, then the project root, then the caller's;
* ``EAGLE3_CONFORMANCE_SGLANG_ENGINE=1`` (sitecustomize runs the torchvision shim);
  ``EAGLE3_CONFORMANCE_SGLANG_GUARDED`` removed (the driver runs the guards, :mod:`.bootstrap`);
* on CPU only: ``SGLANG_USE_CPU_ENGINE=1`` (SGLang's CPU engine, ``sglang/srt/utils/common.py:221-224``),
  ``TORCHDYNAMO_DISABLE=1`` (``spec_utils.py:437`` is ``torch.compile``d: ~18 s of inductor per
  process on CPU), ``EAGLE3_CONFORMANCE_SGLANG_STANDINS=1`` (guards, ``sgl_kernel`` stand-in, patches);
* ``TMPDIR`` = a fresh short directory of the run (:func:`run_engine`), removed after it: SGLang names its ZMQ
  ``ipc://`` sockets with ``tempfile.NamedTemporaryFile(delete=False)`` and never removes them (an engine whose
  process group is killed cannot), so each run left 3 or more socket files in ``/tmp`` before (2,700 in a
  week of this machine's runs, 2026-12-06); short because a socket path has at most 107 bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from eagle3_conformance.environment.procgroup import kill_group, last_error, log_tail
from eagle3_conformance.tools.sglang_engine.bootstrap import ENGINE_ENV, GUARDED_ENV, STANDINS_ENV

SITE_DIR = Path(__file__).resolve().parent / "site"
PROJECT_ROOT = Path(__file__).resolve().parents[3]
LOG_TAIL_LINES = 40


class EngineError(RuntimeError):
    """The engine failed; ``reason`` says why, ``log_tail`` is the end of SGLang's own log.

    Attributes:
        reason: one line: why.
        log_tail: the last lines of SGLang's own log (the driver's stdout/stderr).
    """

    def __init__(self, reason: str, log_tail: str, pgid: Optional[int] = None) -> None:
        super().__init__(f"{reason}\n--- SGLang log (last lines) ---\n{log_tail}")
        self.reason, self.log_tail, self.pgid = reason, log_tail, pgid


class EngineStartError(EngineError):
    """The engine did not start (missing or wrong draft, unsupported dtype, a tripped guard, a timeout)."""


class EngineRunError(EngineError):
    """The engine started but generation failed or ran over its timeout."""


@dataclass
class EngineRun:
    """One engine run.

    Attributes:
        outputs: per prompt ``{"output_ids": [...], "meta_info": {...}}`` (SGLang's meta_info subset:
            ``completion_tokens``, ``spec_verify_ct``, ``spec_accept_length``,
            ``spec_correct_drafts_histogram``, ...).
        timings: seconds: ``start_s``, ``generate_s``, ``shutdown_s``, ``wall_s`` (the whole process).
        records_dir: the hook records (None when not observed); see :mod:`.hooks`.
        sglang_version: the engine's ``sglang.__version__``.
        log_tail: the last lines of SGLang's log.
    """

    outputs: list[dict[str, Any]]
    timings: dict[str, float]
    records_dir: Optional[Path]
    sglang_version: str
    log_tail: str = ""
    spec: dict[str, Any] = field(default_factory=dict)
    pgid: Optional[int] = None


def cpu_bind(tp_size: int) -> str:
    """``SGLANG_CPU_OMP_THREADS_BIND`` for ``tp_size`` CPU ranks: this process's cores split into
    ``tp_size`` contiguous groups, ``|``-separated. SGLang's CPU engine otherwise allows one rank per
    NUMA node (``sglang/srt/utils/numa_utils.py:454-470``; this machine has one).

    Raises:
        ValueError: fewer cores than ranks."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if len(cores) < tp_size:
        raise ValueError(f"tp_size {tp_size} on CPU needs {tp_size} cores; this process has {len(cores)}")
    per = len(cores) // tp_size
    groups = [cores[i * per:(i + 1) * per] for i in range(tp_size)]
    return "|".join(f"{g[0]}-{g[-1]}" if len(g) > 1 else str(g[0]) for g in groups)


def child_env(device: str, tp_size: int = 1) -> dict[str, str]:
    """The driver's environment (see the module docstring; CPU TP > 1 also binds each rank's cores,
    :func:`cpu_bind`, unless ``SGLANG_CPU_OMP_THREADS_BIND`` is set)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR), str(PROJECT_ROOT)] + (
        [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env[ENGINE_ENV] = "1"
    env.pop(GUARDED_ENV, None)  # the driver runs the guards itself (bootstrap.py)
    env.setdefault("OMP_NUM_THREADS", "1")
    if device == "cpu":
        env.update({"SGLANG_USE_CPU_ENGINE": "1", "TORCHDYNAMO_DISABLE": "1", STANDINS_ENV: "1"})
        if tp_size > 1 and not env.get("SGLANG_CPU_OMP_THREADS_BIND"):
            env["SGLANG_CPU_OMP_THREADS_BIND"] = cpu_bind(tp_size)
    else:
        for k in ("SGLANG_USE_CPU_ENGINE", STANDINS_ENV):
            env.pop(k, None)
    return env


def run_engine(target_dir, draft_dir, prompts: list[list[int]], *, device: str = "cpu", dtype: str = "float32",
               max_new_tokens: int = 32, num_steps: int = 3, num_draft_tokens: int = 4, observe: bool = True,
               cuda_graph: bool = False, start_timeout: float = 300, generate_timeout: float = 300,
               workdir: Optional[Path] = None, extra: Optional[dict] = None,
               reference: Optional[dict] = None, record_kv: bool = False,
               extra_hooks: Optional[list[dict]] = None,
               started: Optional[Callable[[subprocess.Popen], None]] = None) -> EngineRun:
    """Start the real ``sglang.Engine`` with EAGLE3 (topk 1, a chain of ``num_steps`` drafts), generate
    greedily for ``prompts`` (token ids) in one batch, shut down. The driver's whole process group is
    killed afterwards, whatever happened.

    Args:
        observe: register :mod:`.hooks` through ``forward_hooks`` (records in ``records_dir``).
        cuda_graph: keep SGLang's CUDA graphs (GPU only; hooks then miss replayed forwards).
        workdir: where the spec, result, log and records go (default: a new temp dir, left for the
            caller to read and remove; :func:`observe_engine` removes the one it makes).
        extra: more driver spec keys (``ignore_eos``, ``max_total_tokens``, ``log_level``, ``tp_size``).
        reference: also record the target's boundaries (the engine as its own reference): the
            ``reference`` config of :func:`.hooks.specs` (``boundaries``, ``max_rows``, ``max_bytes``).
        record_kv: record through the server factory (:func:`.server_hooks.specs`), whose records
            also say where each cached prefix lives (``prefix_locs``), so prefix-cache hits and
            later prefill chunks are attributed (:func:`.captures.attribute`).
        extra_hooks: more ``forward_hooks`` entries after the recorder's (the kill matrix's
            in-engine faults, :mod:`.fault_hooks`).
        started: called with the driver's process right after it starts (:class:`.ahead.EngineJob`
            keeps it to cancel the run).

    Raises:
        EngineStartError: the engine did not start (reason and SGLang's log tail).
        EngineRunError: generation failed or a timeout expired.
    """
    from eagle3_conformance.tools.sglang_engine.hooks import specs as hook_specs
    from eagle3_conformance.tools.sglang_engine.server_hooks import specs as server_specs

    work = Path(workdir or tempfile.mkdtemp(prefix="sglang-engine-"))
    work.mkdir(parents=True, exist_ok=True)
    records = work / "records" if observe else None
    spec = dict(target_dir=str(target_dir), draft_dir=str(draft_dir), prompts=[list(map(int, p)) for p in prompts],
                device=device, dtype=dtype, max_new_tokens=max_new_tokens, num_steps=num_steps,
                num_draft_tokens=num_draft_tokens, cuda_graph=cuda_graph, start_timeout=start_timeout,
                generate_timeout=generate_timeout, result=str(work / "result.json"),
                forward_hooks=((server_specs if record_kv else hook_specs)(records, reference) if records else [])
                + list(extra_hooks or []) or None, **(extra or {}))
    env = child_env(device, int(spec.get("tp_size", 1)))
    env["TMPDIR"] = spec["tmpdir"] = tempfile.mkdtemp(prefix="sgl-t-", dir="/tmp" if Path("/tmp").is_dir() else None)
    (work / "spec.json").write_text(json.dumps(spec))
    log = work / "engine.log"
    t0 = time.perf_counter()
    with open(log, "wb") as lf:
        proc = subprocess.Popen([sys.executable, "-m", "eagle3_conformance.tools.sglang_engine.driver",
                                 str(work / "spec.json")], stdout=lf, stderr=subprocess.STDOUT, cwd=str(work),
                                env=env, start_new_session=True)
        if started is not None:
            started(proc)
        try:
            code = proc.wait(timeout=start_timeout + generate_timeout + 60)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            kill_group(proc)
            shutil.rmtree(spec["tmpdir"], ignore_errors=True)  # SGLang's ipc:// socket files (module docstring)
    wall = time.perf_counter() - t0
    res = json.loads((work / "result.json").read_text()) if (work / "result.json").is_file() else {}
    tail = log_tail(log)
    if code is None:
        raise EngineRunError(f"the engine process ran past {start_timeout + generate_timeout + 60:.0f} s "
                             "and was killed", tail, proc.pid)
    if code != 0 or "outputs" not in res:
        reason = res.get("error") or last_error(tail) or f"the engine process exited with status {code}"
        if res.get("phase", "start") == "start":
            raise EngineStartError(f"sglang.Engine did not start: {reason}", tail, proc.pid)
        raise EngineRunError(f"sglang.Engine generation failed: {reason}", tail, proc.pid)
    return EngineRun(res["outputs"], {**res.get("timings", {}), "wall_s": wall}, records,
                     res.get("sglang_version", ""), tail, spec, proc.pid)
