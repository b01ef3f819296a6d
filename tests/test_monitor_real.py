"""``eagle3-conformance monitor`` on SGLang 0.5.23's real HTTP server (``--enable-metrics``, the CPU recipe),
the SmolLM2-135M pair and its shipped draft, under generated traffic (:mod:`eagle3_conformance.testbed.traffic`),
both servers started with ``serve-hooks``' ``--forward-hooks`` value:

- no alarm: the correct pair under steady traffic, the monitor for 100 s (exit 0);
- the alarm: a second monitor calibrates on the correct pair; the server is stopped and restarted on the
  same port onto the seed incident (the draft config's ``eagle_aux_hidden_state_layer_ids`` ``[-1, 1, 14]``:
  slot 0 is the embedding B_0); the monitor sees the restart (counter reset), raises the alarm, the
  canary (``accept --baseline`` on the held-out prompts) says DROPPED, and the newest process's records
  judged with check-captures' logic name slot 0 as B_0 (exit 1).

Two server starts; about 6 minutes on a quiet machine (docs/monitor.md gives the measured time).
Windows are 10 s here (the default is 30 s) to keep the test short; the false-alarm rate is stated for
them all the same (the threshold follows the window length)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = str(ROOT / "contracts" / "smollm2-135m.yaml")
FAST = ["--window", "10", "--interval", "2", "--warmup", "4", "--min-steps", "30"]


def _port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


@contextmanager
def server(tmp: Path, draft: Path, port: int, hooks: str, name: str):
    import importlib.util

    from eagle3_conformance.testbed.http_server import sglang_server

    missing = [m for m in ("soundfile", "multipart", "prometheus_client") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"SGLang's HTTP server with --enable-metrics imports {missing} (requirements/cpu-lock.txt)")
    try:
        with sglang_server(tmp / f"{name}.log", draft, port, "--forward-hooks", hooks, ready_timeout=600) as (url, _):
            yield url
    except (TimeoutError, RuntimeError) as e:
        pytest.fail(f"{e}:\n" + (tmp / f"{name}.log").read_text()[-3000:])


def cli(*argv, timeout=900):
    return subprocess.run([sys.executable, "-m", "eagle3_conformance.cli", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def monitor(tmp: Path, name: str, *argv) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "eagle3_conformance.cli", "monitor", *argv, "--json",
                             str(tmp / f"{name}.json")], cwd=ROOT, stdout=open(tmp / f"{name}.out", "w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for(path: Path, pattern: str, timeout: float, proc: subprocess.Popen) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pattern in path.read_text():
            return
        if proc.poll() is not None:
            pytest.fail(f"the monitor exited ({proc.returncode}) before {pattern!r}:\n{path.read_text()[-3000:]}")
        time.sleep(2)
    pytest.fail(f"no {pattern!r} within {timeout:g} s:\n{path.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from eagle3_conformance.testbed.http_server import seed_draft
    from eagle3_conformance.testbed.traffic import Traffic, served_model
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft

    tmp = tmp_path_factory.mktemp("monitor-real")
    draft = Path(ensure_trained_draft(RECIPE).draft_dir)
    caps = tmp / "captures"
    r = cli("serve-hooks", "--contract", CONTRACT, "--out", str(caps))
    assert r.returncode == 0, r.stderr
    hooks, port, base = r.stdout.strip(), _port(), tmp / "baseline.json"
    t0 = time.time()
    out = {"tmp": tmp}
    with server(tmp, draft, port, hooks, "correct") as url:
        r = cli("accept", "--server", url, "--contract", CONTRACT, "--prompts", "8", "--max-tokens", "32",
                "--concurrency", "8", "--record", str(base))
        assert r.returncode == 0, r.stdout + r.stderr
        traffic = Traffic(url, served_model(url), "mixed", concurrency=4, seed=1).start()
        quiet = monitor(tmp, "quiet", "--server", url, "--baseline", str(base), "--duration", "100", *FAST)
        out["quiet_rc"] = quiet.wait(timeout=400)
        watch = monitor(tmp, "watch", "--server", url, "--baseline", str(base), "--contract", CONTRACT,
                        "--captures", str(caps), "--max-captures", "8", *FAST)
        _wait_for(tmp / "watch.out", "(watching)", 300, watch)
    out["restart_at"] = time.time()
    with server(tmp, seed_draft(tmp, draft), port, hooks, "seed"):
        out["seed_ready_at"] = time.time()
        _wait_for(tmp / "watch.out", "ALARM", 300, watch)
        _wait_for(tmp / "watch.out", "canary", 300, watch)
        time.sleep(3)
        _wait_for(tmp / "watch.out", "window", 120, watch)  # the next window: the captures have been judged
        watch.send_signal(signal.SIGTERM)
        out["watch_rc"] = watch.wait(timeout=300)
        traffic.stop(join=60)
    out["seconds"] = time.time() - t0
    return out


def test_the_correct_pair_under_steady_traffic_raises_no_alarm(runs):
    doc = json.loads((runs["tmp"] / "quiet.json").read_text())
    assert runs["quiet_rc"] == 0, (runs["tmp"] / "quiet.out").read_text()
    assert doc["verdict"] == "NO ALARM" and doc["summary"]["by_status"].get("judged", 0) >= 3  # 5-6 at load 8-14
    assert doc["server"]["version"] == "0.5.23" and doc["detection"]


def test_a_restart_onto_the_seed_incident_raises_the_alarm_with_canary_and_diagnosis(runs):
    text = (runs["tmp"] / "watch.out").read_text()
    doc = json.loads((runs["tmp"] / "watch.json").read_text())
    assert runs["watch_rc"] == 1, text
    assert any(e.startswith("counter reset") for w in doc["windows"] for e in w["events"]), text
    a = doc["alarms"][0]
    assert a["state"] == "fault" and a["canary"]["verdict"] == "DROPPED", text
    assert a["time"] > runs["seed_ready_at"] - 5
    assert "slot 0" in a["diagnosis_line"] and "B_0" in a["diagnosis_line"], a
    assert "changed since" in text or "differs from the baseline" in text
