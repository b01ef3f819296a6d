"""Run independent parts of a job (scan shards) as Ray tasks and stream their results back.

Ray (2.60.0, pinned in requirements/cpu-lock.txt) is the execution engine: the one SGLang,
vLLM and their training stacks already run on. :func:`run_tasks`

- joins the cluster at ``address`` (``ray.init(address=...)``; a ``host:port`` that does not
  accept a TCP connection within :data:`CONNECT_TIMEOUT_S` is refused before Ray is asked, so a
  wrong address never hangs), or, with no address and no Ray running in this process, starts a
  local Ray on demand (``ray.init(num_cpus=...)``, no dashboard) and shuts it down afterwards;
- submits one remote task per part (``num_cpus=cpus_per_task``, ``scheduling_strategy="SPREAD"`` so the parts
  of a multi-node cluster land on different nodes), with ``max_retries`` for system failures (a
  worker process or node that dies is re-run by Ray) and ``retry_exceptions=False`` (an error the
  part raises itself, e.g. an unreadable dataset, is deterministic and reported at once);
- runs each task as a Ray streaming generator that yields its cumulative progress while it runs
  and its result last; the driver waits on all of them (``ray.wait`` over ``ObjectRefGenerator``),
  forwards the progress increments to ``on_progress`` and keeps results as they arrive;
- raises :class:`TaskFailed` naming the part when a task fails for good (its exception, or a
  worker that died ``max_retries + 1`` times) and cancels the others: a part is never lost
  silently.

The part function is passed in (``fn(spec, on_progress) -> dict``) and must be importable by
reference on the workers (a module-level function of an installed package); this module knows no
scan. It also does the CPU accounting of the tasks: how many CPUs this process may use
(:func:`available_cpus`), each worker's share (:func:`default_cpus_per_worker`), and torch's
threads while a part runs (:func:`torch_threads`). Ray's own documentation of these calls:
docs.ray.io "Fault tolerance / Tasks" (``max_retries``, ``retry_exceptions``) and "ray.wait".
"""

from __future__ import annotations

import math
import os
import socket
import time
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from eagle3_conformance.core.errors import DataError

CONNECT_TIMEOUT_S = 5.0
"""Seconds a ``--ray-address`` host:port gets to accept a TCP connection."""

POLL_S = 0.3
"""Seconds between progress polls while tasks run."""

START_WARN_S = 60.0
"""After this many seconds, parts whose Ray task has checked no sample yet are named on stderr
(Ray keeps a task that finds no free CPU pending without a word)."""


class TaskFailed(DataError):
    """A part could not be run: Ray unreachable, a task that raised, or a worker that kept dying.

    Attributes:
        part: index of the failed part in the submitted order (None: the cluster itself failed).
    """

    def __init__(self, message: str, part: Optional[int] = None):
        super().__init__(message)
        self.part = part


def _resolve_auto() -> str:
    """The ``host:port`` Ray's own ``address="auto"`` would join (``RAY_ADDRESS``, else the
    cluster recorded in ``/tmp/ray/ray_current_cluster`` by ``ray start``, else a GCS process
    found on this machine): ``ray._private.services.canonicalize_bootstrap_address``, ray 2.60.0.

    Raises:
        TaskFailed: no running cluster is recorded or found.
    """
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:  # another Ray: let ray.init resolve it
        return "auto"
    try:
        resolved = canonicalize_bootstrap_address("auto")
    except Exception as e:  # ConnectionError: nothing recorded or running
        raise TaskFailed(f"--ray-address auto: no running Ray cluster found on this machine ({type(e).__name__}: "
                         f"{e}); start one with `ray start --head` or pass the head's host:port") from None
    if not resolved:
        raise TaskFailed("--ray-address auto: no running Ray cluster found on this machine; start one with "
                         "`ray start --head` or pass the head's host:port")
    return resolved


def _check_reachable(address: str) -> str:
    """Refuse a ``host:port`` (or ``ray://host:port``) that accepts no TCP connection.

    ``auto`` is first resolved as Ray resolves it (:func:`_resolve_auto`), so a stale record of a
    cluster that is gone is refused too, instead of Ray retrying it without end.

    Returns:
        The address to join (``auto`` resolved to ``host:port``).

    Raises:
        TaskFailed: malformed address, no cluster for ``auto``, or nothing listening.
    """
    if address == "local":
        return address
    given = address
    if address == "auto":
        address = _resolve_auto()
        if address == "auto":
            return address
    hp = address.split("://", 1)[-1]
    host, _, port = hp.rpartition(":")
    try:
        port_n = int(port)
    except ValueError:
        raise TaskFailed(f"--ray-address {given!r}: expected host:port (e.g. 10.0.0.1:6379), 'auto' or "
                         "ray://host:port") from None
    via = " (where 'auto' points: RAY_ADDRESS or the last `ray start` on this machine)" if given == "auto" else ""
    try:
        with socket.create_connection((host or "127.0.0.1", port_n), timeout=CONNECT_TIMEOUT_S) as sk:
            http2 = _answers_http2(sk)
    except OSError as e:
        raise TaskFailed(f"Ray cluster at {address}{via} is unreachable ({type(e).__name__}: {e}); start it with "
                         "`ray start --head` or pass the head's address") from None
    if not http2:
        raise TaskFailed(f"{address}{via} accepts connections but does not answer as a Ray head (no gRPC/HTTP2 "
                         f"handshake within {CONNECT_TIMEOUT_S:.0f} s: another service on that port?); pass the head's "
                         "GCS address (`ray start --head` prints it; port 6379 by default)") from None
    return address


HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
"""An HTTP/2 client connection preface and an empty SETTINGS frame (RFC 9113 section 3.4)."""


def _answers_http2(sk: socket.socket) -> bool:
    """Whether the server on the connected socket ``sk`` answers as an HTTP/2 server (a Ray GCS
    and a Ray Client server are gRPC servers, gRPC runs on HTTP/2): after the client preface, an
    HTTP/2 server's first frame is its SETTINGS frame (RFC 9113 section 3.4: frame type 0x4 in the
    fourth byte of the 9-byte frame header); another service answers otherwise, closes, or says
    nothing within :data:`CONNECT_TIMEOUT_S`. Ray itself retries a port that accepts TCP but
    speaks another protocol for minutes (grpcio, which could ask instead, is not installed with
    Ray 2.60)."""
    head = b""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    try:
        sk.sendall(HTTP2_PREFACE)
        while len(head) < 9 and time.monotonic() < deadline:
            chunk = sk.recv(9 - len(head))
            if not chunk:
                break
            head += chunk
    except OSError:  # reset or timed out: not an HTTP/2 server
        return False
    return len(head) == 9 and head[3] == 0x04


def connect(address: Optional[str], num_cpus: int, runtime_env: Optional[dict[str, Any]] = None) -> bool:
    """Join or start Ray. Returns True when this call started Ray (the caller shuts it down).

    Args:
        address: cluster address (``host:port``, ``ray://host:port``, ``auto``), None for local.
        num_cpus: CPUs of a local Ray started here (ignored when joining a cluster).
        runtime_env: Ray runtime_env of the job (None: workers inherit this process's environment
            on a local Ray; on a cluster they use the nodes' own install of this package).

    Raises:
        TaskFailed: the address is unreachable or ``ray.init`` fails.
    """
    if address:  # before anything else: a wrong address is bad input even when Ray is running
        address = _check_reachable(address)
    import ray

    if ray.is_initialized():
        return False
    kw: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR"}
    if runtime_env:
        kw["runtime_env"] = runtime_env
    try:
        if address:
            ray.init(address=address, **kw)
        else:
            # address="local": always a new local Ray, never a cluster found on this machine
            ray.init(address="local", num_cpus=max(int(num_cpus), 1), include_dashboard=False, **kw)
    except Exception as e:  # ray raises ConnectionError, RuntimeError, ValueError
        raise TaskFailed(f"cannot start or join Ray{f' at {address}' if address else ''}: "
                         f"{type(e).__name__}: {e}") from None
    return True


def _run_one(fn: Callable, spec: Any):  # a Ray streaming-generator task, on a worker
    """Run ``fn(spec, progress)`` in a thread and yield ``("progress", samples, bytes)``
    (cumulative) every :data:`POLL_S` while it runs, then ``("done", result)``."""
    import threading

    import ray

    done = [0, 0]
    box: dict[str, Any] = {}

    def prog(ns: int, nb: int) -> None:
        done[0] += ns
        done[1] += nb

    def work() -> None:
        try:
            box["res"] = fn(spec, prog)
        except BaseException as e:  # re-raised below, in the task's own thread
            box["err"] = e

    th = threading.Thread(target=work, name="conformance-part", daemon=True)
    th.start()
    sent = (0, 0)
    while th.is_alive():
        th.join(POLL_S)
        if (done[0], done[1]) != sent:
            sent = (done[0], done[1])
            yield ("progress", sent[0], sent[1])
    if "err" in box:
        raise box["err"]
    res = box["res"]
    ctx = ray.get_runtime_context()
    res["ray"] = {"node_id": ctx.get_node_id(), "pid": os.getpid()}
    yield ("progress", done[0], done[1])
    yield ("done", res)


def run_tasks(fn: Callable[[Any, Callable[[int, int], None]], dict[str, Any]], specs: Sequence[Any], *,
              describe: Callable[[Any], str] = str, on_progress: Optional[Callable[[int, int], None]] = None,
              address: Optional[str] = None, max_retries: int = 2,
              runtime_env: Optional[dict[str, Any]] = None, cpus_per_task: int = 1) -> list[dict[str, Any]]:
    """Run ``fn(spec, progress)`` for every spec as a Ray task; results in the order of ``specs``.

    Each task is a Ray streaming generator (``ObjectRefGenerator``): it yields its cumulative
    progress while the part runs and its result last; the driver waits on all generators at once
    (``ray.wait``), forwards progress increments and keeps each result as it arrives. A retried
    attempt restarts its task's cumulative count, so progress never counts twice.

    Args:
        fn: the part function (importable by reference on the workers); returns a JSON-able dict.
        specs: one picklable spec per task.
        describe: names a spec in error messages (e.g. ``"shard 1/4"``).
        on_progress: called in this process with (samples, bytes) increments, summed over tasks.
        address: Ray cluster address, None: the Ray of this process, or a local one started here.
        max_retries: re-runs of a task whose worker dies (Ray's ``max_retries``).
        runtime_env: extra Ray runtime_env for the job (passed to ``ray.init`` when this call
            starts or joins Ray).
        cpus_per_task: Ray ``num_cpus`` of each task (a local Ray started here gets
            ``len(specs) * cpus_per_task`` CPUs); the part function sets its own thread count.

    Returns:
        The dicts ``fn`` returned, each with a ``"ray"`` entry (node_id, pid).

    Raises:
        TaskFailed: Ray cannot be reached or started, or a task failed for good (the message names
            the part by ``describe`` and says whether it raised or its worker died).
    """
    import ray

    cpus_per_task = max(int(cpus_per_task), 1)
    started = connect(address, len(specs) * cpus_per_task, runtime_env)
    try:
        remote = ray.remote(_run_one).options(num_cpus=cpus_per_task, max_retries=max(int(max_retries), 0),
                                               retry_exceptions=False, scheduling_strategy="SPREAD",
                                               num_returns="streaming")
        gens = {}
        for k, s in enumerate(specs):
            gens[remote.remote(fn, s)] = k
        pending = list(gens)
        out: dict[int, dict[str, Any]] = {}
        seen = [[0, 0] for _ in specs]
        shown = [0, 0]
        running: set[int] = set()  # parts that reported a checked sample (not `started`: ours)
        t_dispatch, warned = time.monotonic(), False
        while pending:
            ready, _ = ray.wait(pending, num_returns=1, timeout=POLL_S)
            if not warned and time.monotonic() - t_dispatch > START_WARN_S and len(running) < len(specs):
                warned = True
                _warn_not_started([describe(specs[k]) for k in range(len(specs)) if k not in running])
            for g in ready:
                k = gens[g]
                msg = _next_message(g, k, partial(describe, specs[k]), pending, out, max_retries)
                if msg is None:
                    continue
                running.add(k)  # a sample checked (or the result): it runs
                if msg[0] == "done":
                    out[k] = msg[1]
                else:
                    seen[k] = [msg[1], msg[2]]
                    ns, nb = sum(x[0] for x in seen), sum(x[1] for x in seen)
                    if on_progress is not None and (ns > shown[0] or nb > shown[1]):
                        on_progress(max(ns - shown[0], 0), max(nb - shown[1], 0))
                        shown[:] = [max(ns, shown[0]), max(nb, shown[1])]
        return [out[k] for k in range(len(specs))]
    finally:
        if started:
            ray.shutdown()


def _next_message(g, k: int, name: Callable[[], str], pending: list, out: dict, max_retries: int):
    """The next message of task ``k``'s streaming generator ``g``: ``("progress", samples, bytes)``
    or ``("done", result)``; None when it ended after its result (``g`` leaves ``pending``).

    Raises:
        TaskFailed: the task ended without a result, the part raised, or its worker died
            ``max_retries + 1`` times; the other tasks are cancelled.
    """
    import ray
    from ray.exceptions import RayError, RayTaskError

    try:
        return ray.get(next(g))
    except StopIteration:
        pending.remove(g)
        if k not in out:
            _cancel(pending)
            raise TaskFailed(f"{name()}: the Ray task ended without a result", k) from None
        return None
    except RayTaskError as e:  # the part raised: deterministic, not retried
        cause = e.cause if getattr(e, "cause", None) is not None else e
        _cancel(pending)
        raise TaskFailed(f"{name()}: the Ray task failed: {type(cause).__name__}: {cause}", k) from None
    except RayError as e:  # worker or node died max_retries + 1 times
        _cancel(pending)
        raise TaskFailed(f"{name()}: its Ray task's worker died {max_retries + 1} time(s) ({type(e).__name__}: "
                         f"{str(e).splitlines()[0]}); its samples were not checked", k) from None


def _warn_not_started(parts: list[str]) -> None:
    """Say on stderr which parts have checked no sample yet: most likely waiting for a worker (a
    cluster whose CPUs other jobs hold, or whose nodes lack the resources), which Ray does without
    a word."""
    import sys

    import ray

    try:
        free = {k: v for k, v in ray.available_resources().items() if k == "CPU" or not k.startswith("node:")}
    except Exception:  # the cluster went away: ray.wait reports it
        free = {}
    print(f"eagle3-conformance: after {START_WARN_S:.0f} s, the Ray task(s) of {', '.join(parts)} have checked no sample "
          f"yet: waiting for a free CPU on the cluster (available now: {free or 'none'}), or a first sample that "
          "takes long; still waiting (Ctrl-C stops)", file=sys.stderr, flush=True)


def _cancel(refs: list) -> None:
    import ray

    for r in refs:
        try:
            ray.cancel(r, force=True)
        except Exception:  # already finished or gone
            pass


# --- CPU accounting of the tasks -----------------------------------------------------------------


CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
"""cgroup v2 CPU quota of this process's container (``quota period`` or ``max period``)."""


def available_cpus() -> int:
    """CPUs this process may use: its affinity mask (``os.sched_getaffinity``, else
    ``os.cpu_count()``), capped by the container's cgroup v2 CPU quota where one is set
    (:data:`CGROUP_CPU_MAX`: quota / period, rounded up; a Kubernetes CPU limit), at least 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    try:
        quota, period = CGROUP_CPU_MAX.read_text().split()[:2]
        if quota != "max":
            n = min(n, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError, ZeroDivisionError):
        pass
    return max(n, 1)


def cpu_share(workers: int) -> int:
    """This machine's CPUs (:func:`available_cpus`) split evenly over ``workers``, at least 1."""
    return max(available_cpus() // max(int(workers), 1), 1)


def default_cpus_per_worker(workers: int, ray_address: Optional[str] = None) -> int:
    """CPUs (torch threads; Ray ``num_cpus`` of a task) each worker gets when none are asked for.

    ``CONFORMANCE_TORCH_THREADS`` when set (the user's choice for every torch op of this
    package; it wins over both defaults below); on an existing Ray cluster (``ray_address``) 1,
    since this machine's CPU count says nothing of the nodes'; else :func:`cpu_share`: the all-rows RMS pass is
    compute-bound once the data is in the page cache, so one worker uses every core
    (``benchmarks/bench_check_data.py``).

    Raises:
        ValueError: ``CONFORMANCE_TORCH_THREADS`` is set to something else than a thread count.
    """
    from eagle3_conformance.environment import torch_env

    env = torch_env.threads_from_env()
    if env:
        return env
    if ray_address:
        return 1
    return cpu_share(workers)


@contextmanager
def torch_threads(n: Optional[int]):
    """torch's intra-op threads set to ``n`` inside the block (None: unchanged), the previous
    setting given back after."""
    import torch

    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)
