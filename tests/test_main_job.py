"""The main job's runner (scripts/main_job.py, `tox -e conformance`): the same three commands as before,
lane 2 beside lane 1, outputs whole and in order, the first failure's exit status."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture()
def job(monkeypatch):
    spec = importlib.util.spec_from_file_location("main_job", REPO / "scripts" / "main_job.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "shared_caches", lambda: None)
    return mod


def test_the_commands_are_the_main_job_s_three(job, tmp_path):
    (suite,), (specforge, faults) = job.commands(tmp_path, ["-k", "training"])
    assert suite[1:] == ["-m", "pytest", "-m", "conformance", "-p", "no:randomly", "-rs", "--conformance-durations",
                         "--conformance-html", str(tmp_path / "conformance-report.html"), "contracts", "-k", "training"]
    spec = "contracts/specforge/smollm2-135m.yaml"
    assert specforge[1:] == ["-m", "pytest", "-m", "conformance", "-p", "no:randomly", "-rs", "-q",
                             "--conformance-durations", "--contract", spec, "--conformance-paths", "specforge",
                             "--conformance-html",
                             str(tmp_path / "conformance-report-specforge.html"), spec]
    assert faults[1:] == ["faults", "--pair", "synthetic", "--pair", "smollm2-135m", "--html",
                          str(tmp_path / "kill-matrix.html")]
    assert suite[0] == specforge[0] == str(tmp_path / "cpu-lock" / "bin" / "python")


def _fake(monkeypatch, job, tmp_path, codes=(0, 0, 0)):
    """Three commands that log their start and end to one file; lane 1 waits until lane 2's first
    command has started (so the test ends only if they run side by side)."""
    log = tmp_path / "log"

    def cmd(name, code, wait_for=None):
        body = (f"import time, pathlib; p = pathlib.Path({str(log)!r}); "
                f"p.open('a').write('start {name}\\n'); ")
        if wait_for:
            body += (f"t = time.time()\nwhile '{wait_for}' not in p.read_text() and time.time() - t < 20: "
                     "time.sleep(0.05)\n")
        body += f"print('output of {name}'); p.open('a').write('end {name}\\n'); raise SystemExit({code})"
        return [sys.executable, "-c", body]

    monkeypatch.setattr(job, "commands", lambda wd, args: (
        [cmd("suite", codes[0], wait_for="start specforge")], [cmd("specforge", codes[1]), cmd("faults", codes[2])]))
    return log


def test_lane_2_runs_beside_lane_1_and_its_output_follows_whole(job, tmp_path, monkeypatch, capfd):
    log = _fake(monkeypatch, job, tmp_path)
    assert job.run(tmp_path, []) == 0
    lines = log.read_text().splitlines()
    assert lines.index("start specforge") < lines.index("end suite")  # beside, not after
    out = capfd.readouterr().out
    assert out.index("output of suite") < out.index("[lane 2]") < out.index("output of specforge") \
        < out.index("output of faults")
    assert "main job: suite" in out and "specforge contract" in out and "kill matrices" in out
    assert out.count(" s (CPU ") == 3 and "CPU " in out.rsplit("; wall", 1)[1]


def test_each_command_s_cpu_seconds_are_its_own(job):
    """call() returns the exit status and the CPU seconds of that child and what it waited for: a command
    that burns 0.5 s of CPU in a grandchild reads at least that, one that sleeps reads almost none."""
    burn = ("import subprocess, sys; subprocess.run([sys.executable, '-c', "
            "'import time\\nwhile time.process_time() < 0.5: pass']); raise SystemExit(3)")
    code, cpu = job.call([sys.executable, "-c", burn])
    assert code == 3 and cpu >= 0.5
    code, cpu = job.call([sys.executable, "-c", "import time; time.sleep(0.5)"])
    assert code == 0 and cpu < 0.45


@pytest.mark.parametrize("codes,want", [((1, 0, 0), 1), ((0, 3, 0), 3), ((0, 0, 5), 5), ((2, 0, 5), 2)])
def test_the_first_failure_in_order_is_the_exit_status(job, tmp_path, monkeypatch, codes, want):
    _fake(monkeypatch, job, tmp_path, codes)
    assert job.run(tmp_path, []) == want


def test_a_failing_specforge_run_stops_lane_2_as_tox_stopped(job, tmp_path, monkeypatch):
    log = _fake(monkeypatch, job, tmp_path, (0, 1, 0))
    assert job.run(tmp_path, []) == 1
    assert "start faults" not in log.read_text()


def test_one_lane_runs_them_one_after_the_other(job, tmp_path, monkeypatch, capfd):
    log = tmp_path / "log"

    def cmd(name):
        return [sys.executable, "-c", f"import pathlib; pathlib.Path({str(log)!r}).open('a').write('{name}\\n')"]

    monkeypatch.setattr(job, "commands", lambda wd, args: ([cmd("suite")], [cmd("specforge"), cmd("faults")]))
    assert job.run(tmp_path, [], lanes=1) == 0
    assert log.read_text().splitlines() == ["suite", "specforge", "faults"]
    assert "(1 lane)" in capfd.readouterr().out
