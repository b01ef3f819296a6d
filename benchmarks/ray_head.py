"""A one-node Ray cluster for bench_check_data.py's ``check-data:2@cluster`` reader (:class:`RayHead`), and
the CPUs check-data counts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from eagle3_conformance.environment.ports import free_port

ROOT = Path(__file__).resolve().parent.parent  # the checkout whose package the head's workers import


def cores() -> int:
    """The CPUs check-data itself counts (affinity mask, container quota)."""
    from eagle3_conformance.scan.ray_tasks import available_cpus

    return available_cpus()


class RayHead:
    """A one-node Ray cluster (``ray start --block --head``, this machine's CPUs) started before a measurement
    and ended after it, as on a cluster that is already running: the measured run pays its job's
    worker start and imports, not the cluster's start."""

    def __enter__(self) -> str:
        import socket

        self.port = free_port()
        env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen([str(Path(sys.executable).parent / "ray"), "start", "--block", "--head",
                                      f"--num-cpus={cores()}", "--disable-usage-stats", "--include-dashboard=false",
                                      "--node-ip-address=127.0.0.1", f"--port={self.port}"],
                                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("ray head did not start") from None
                time.sleep(0.5)
        time.sleep(3)  # the raylet registers after the GCS port opens
        os.environ["BENCH_RAY_ADDRESS"] = f"127.0.0.1:{self.port}"
        os.environ["RAY_AUTH_MODE"] = "disabled"
        return os.environ["BENCH_RAY_ADDRESS"]

    def __exit__(self, *exc) -> None:
        import signal

        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)
        marker = Path("/tmp/ray/ray_current_cluster")  # written by this head; stale once it is gone
        if marker.is_file() and marker.read_text().strip().endswith(f":{self.port}"):
            marker.unlink()
