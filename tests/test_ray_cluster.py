"""check-data on a two-node Ray cluster on this machine: `ray start --head`, then a second
`ray start --address` with its own resources (the multi-node path of eagle3_conformance.scan.ray_tasks).

Both nodes are started by this test with ``ray start --block`` as child processes, so they are
ours to end (SIGTERM: `ray start --block` stops its node's processes); `ray stop` is never used
(it would stop every Ray on the machine).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eagle3_conformance.cli import main
from eagle3_conformance.environment.ports import free_port

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "contracts" / "tiny-llama.yaml"
RAY = str(Path(sys.executable).parent / "ray")

pytestmark = pytest.mark.slow


def _node_args() -> list[str]:
    """Ports a second node on the same machine must not share with the first."""
    return [f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
            f"--metrics-export-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
            f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}"]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """A Ray head (1 CPU, resource node_a) and a worker node (1 CPU, resource node_b), with
    token authentication off (RAY_AUTH_MODE=disabled, also for this process's driver): the
    cluster listens on 127.0.0.1 only and lives as long as this module."""
    port = free_port()
    mp = pytest.MonkeyPatch()
    mp.setenv("RAY_AUTH_MODE", "disabled")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "RAY_USAGE_STATS_ENABLED": "0"}
    logs = tmp_path_factory.mktemp("ray-nodes")
    procs = []

    def start(args: list[str], name: str) -> None:
        out = open(logs / f"{name}.log", "w")
        procs.append(subprocess.Popen([RAY, "start", "--block", "--num-cpus=1", "--disable-usage-stats", *args],
                                      env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))

    start(["--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--include-dashboard=false", '--resources={"node_a": 1}', *_node_args()],
          "head")
    addr = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:  # the head is up when its GCS port accepts connections
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or procs[0].poll() is not None:
                raise RuntimeError(f"ray head did not start: {(logs / 'head.log').read_text()[-2000:]}") from None
            time.sleep(0.5)
    start([f"--address={addr}", "--node-ip-address=127.0.0.1", '--resources={"node_b": 1}', *_node_args()], "worker")
    r = subprocess.run([sys.executable, "-c", f"""
import ray, time
ray.init(address={addr!r}, logging_level="ERROR", log_to_driver=False)
t = time.monotonic()
while len([n for n in ray.nodes() if n["Alive"]]) < 2 and time.monotonic() - t < 120:
    time.sleep(0.5)
print(len([n for n in ray.nodes() if n["Alive"]]))
"""], env=env, capture_output=True, text=True, timeout=180)
    try:
        assert r.stdout.strip().endswith("2"), (r.stdout, r.stderr[-2000:], (logs / "worker.log").read_text()[-2000:])
        yield addr
    finally:
        for p in reversed(procs):  # only the processes this fixture started
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        mp.undo()
        marker = Path("/tmp/ray/ray_current_cluster")  # written by our head; stale once it is gone
        if marker.is_file() and marker.read_text().strip() == addr:
            marker.unlink()


def test_two_node_scan_spreads_over_both_nodes_and_equals_one_process(two_nodes, tiny, tmp_path, capsys):
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    base = ["check-data", str(TINY), "--data", str(tiny.data_dir), "--no-reference", "--sample", "2", "--quiet"]
    assert main([*base, "--json", str(one)]) == 0
    # the cluster run in its own process, as a user runs it: Ray in this pytest process may already
    # have been started and shut down by another test, and re-joining another cluster from the same
    # process after that hung (the tasks never ran)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "eagle3_conformance.cli", *base, "--workers", "2", "--ray-address", two_nodes,
                        "--json", str(two)], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    key = lambda f: json.dumps(f, sort_keys=True)  # noqa: E731
    assert [key(f) for f in b["findings"]] == [key(f) for f in a["findings"]]
    eng = b["meta"]["engine"]
    assert eng["kind"] == "ray" and eng["address"] == two_nodes and eng["tasks"] == 2
    assert eng["nodes"] == 2, "SPREAD scheduling put both shard tasks on one node"
    assert b["meta"]["shard_samples"] == a["meta"]["shard_samples"] == 12
