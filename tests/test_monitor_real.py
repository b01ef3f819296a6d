"""``eagle3-conformance monitor`` on SGLang 0.5.23's real HTTP server (``--enable-metrics``, the CPU recipe),
the SmolLM2-135M pair and its shipped draft, under generated traffic (:mod:`eagle3_conformance.testbed.traffic`),
both server processes started with ``serve-hooks``' ``--forward-hooks`` value:

- no alarm: the correct pair under steady traffic, a monitor with ``--duration`` (exit 0);
- the alarm: beside it, a second monitor calibrates on the correct pair; the server is stopped and
  restarted on the same port onto the seed incident (the draft config's ``eagle_aux_hidden_state_layer_ids``
  ``[-1, 1, 14]``: slot 0 is the embedding B_0); the monitor sees the restart (counter reset), raises
  the alarm dated from the restart, the canary (``accept --baseline`` on the held-out prompts) says
  DROPPED, and the newest process's records judged with check-captures' logic name slot 0 as B_0 (exit 1).

As cheap as it stays honest: the two monitors run at once on the first server process (the quiet one's
windows are the second one's calibration), the traffic stops at the alarm (the canary then runs
alone), the monitor is stopped as soon as it alarms (it finishes the canary and the captures first),
two captures are judged. Windows are 5 s (the default is 30 s): the threshold follows the window
length (h = ln(windows per day / 0.1) = 12.06, Lorden's bound for 0.1 false alarms a day at 5 s
windows), ``--min-steps 15`` (about one finished request) and 4 calibration windows. Two real server
starts remain, about 1 minute each on a quiet machine: docs/monitor.md gives the measured time, and
the test is in the ``soak`` tier (``tox -e soak``), which CI does not run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from eagle3_conformance.environment.ports import free_port as _port

pytestmark = [pytest.mark.slow, pytest.mark.soak]  # minutes of real servers: `tox -e soak`, not CI

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = str(ROOT / "contracts" / "smollm2-135m.yaml")
FAST = ["--window", "5", "--interval", "1", "--warmup", "4", "--min-steps", "15"]
QUIET_S = 60



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
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft

    tmp = tmp_path_factory.mktemp("monitor-real")
    draft = Path(ensure_trained_draft(RECIPE).draft_dir)
    caps = tmp / "captures"
    r = cli("serve-hooks", "--contract", CONTRACT, "--out", str(caps))
    assert r.returncode == 0, r.stderr
    hooks, port, base = r.stdout.strip(), _port(), tmp / "baseline.json"
    t0 = time.time()
    out: dict = {"tmp": tmp}
    started: list = []
    try:
        _phases(tmp, draft, caps, hooks, port, base, out, started)
    finally:  # a failed wait leaves no monitor and no traffic behind
        from eagle3_conformance.environment.procgroup import kill_group

        for p in started:
            if not isinstance(p, subprocess.Popen):
                p.stop(join=30)
            elif p.poll() is None:
                kill_group(p)
    out["seconds"] = time.time() - t0
    (tmp / "times.json").write_text(json.dumps({k: v for k, v in out.items() if k != "tmp"}))
    return out


def _phases(tmp: Path, draft: Path, caps: Path, hooks: str, port: int, base: Path, out: dict, started: list) -> None:
    """The two server processes and what runs against them (``started``: the traffic and the monitors)."""
    from eagle3_conformance.testbed.http_server import seed_draft
    from eagle3_conformance.testbed.traffic import Traffic, served_model

    t0 = time.time()
    with server(tmp, draft, port, hooks, "correct") as url:
        out["first_ready"] = time.time() - t0
        r = cli("accept", "--server", url, "--contract", CONTRACT, "--prompts", "8", "--max-tokens", "32",
                "--concurrency", "8", "--record", str(base))
        assert r.returncode == 0, r.stdout + r.stderr
        traffic = Traffic(url, served_model(url), "mixed", concurrency=4, seed=1).start()
        started.append(traffic)
        watch = monitor(tmp, "watch", "--server", url, "--baseline", str(base), "--contract", CONTRACT,
                        "--captures", str(caps), "--max-captures", "2", *FAST)
        quiet = monitor(tmp, "quiet", "--server", url, "--baseline", str(base), "--duration", str(QUIET_S), *FAST)
        started += [watch, quiet]
        out["quiet_rc"] = quiet.wait(timeout=QUIET_S + 300)
        _wait_for(tmp / "watch.out", "(watching)", 300, watch)
    out["restart_at"] = time.time()
    with server(tmp, seed_draft(tmp, draft), port, hooks, "seed"):
        out["seed_ready_at"] = time.time()
        _wait_for(tmp / "watch.out", "ALARM", 300, watch)
        traffic.stop(join=60)
        watch.send_signal(signal.SIGTERM)  # it ends after the canary and the captures of this alarm
        out["watch_rc"] = watch.wait(timeout=600)


def test_the_correct_pair_under_steady_traffic_raises_no_alarm(runs):
    doc = json.loads((runs["tmp"] / "quiet.json").read_text())
    assert runs["quiet_rc"] == 0, (runs["tmp"] / "quiet.out").read_text()
    watched = [w for w in doc["windows"] if w["status"] == "judged" and w["phase"] == "watching"]
    assert doc["verdict"] == "NO ALARM" and len(watched) >= 3, doc["summary"]
    assert doc["server"]["version"] == "0.5.23" and doc["detection"]


def test_a_restart_onto_the_seed_incident_raises_the_alarm_with_canary_and_diagnosis(runs):
    text = (runs["tmp"] / "watch.out").read_text()
    doc = json.loads((runs["tmp"] / "watch.json").read_text())
    assert runs["watch_rc"] == 1, text
    assert len(doc["restarts"]) == 1, text
    a = doc["alarms"][0]
    assert a["onset_time"] >= doc["restarts"][0] and a["time"] > runs["seed_ready_at"] - 5, a
    assert a["state"] == "fault" and a["canary"]["verdict"] == "DROPPED", text
    assert "slot 0" in a["diagnosis_line"] and "B_0" in a["diagnosis_line"], a
    assert "differs from the baseline" in text
