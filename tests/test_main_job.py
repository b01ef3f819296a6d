"""The main job's runner (scripts/main_job.py, `tox -e conformance`): the same three commands as before,
lane 2 beside lane 1, outputs whole and in order, the first failure's exit status."""

from __future__ import annotations

import importlib.util
import sys
import time
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
    assert out.rsplit("main job: suite", 1)[1].count(" s (CPU ") == 3 and "CPU " in out.rsplit("; wall", 1)[1]
    assert "main job: the real pair's caches (smollm2-135m, smollm2-135m-bf16 beside it): " in out
    assert "main job: the real pair's caches 0 s (CPU " in out and "(the caches 0 s, then 2 lanes)" in out


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
    assert "then 1 lane)" in capfd.readouterr().out


def _process_cpu():
    spec = importlib.util.spec_from_file_location("process_cpu", REPO / "scripts" / "process_cpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_each_kind_of_process_s_cpu_is_counted_under_its_kind():
    """scripts/process_cpu.py (CONFORMANCE_MAIN_JOB_PROFILE=1): a grandchild that burns about 1 s of CPU under a
    renamed command line is counted under its kind; an idle child adds (about) nothing."""
    import subprocess

    pc = _process_cpu()
    assert pc.kind("sglang::scheduler") == "engine scheduler"
    assert pc.kind("python -m pytest -m conformance --contract s.yaml --conformance-paths specforge s.yaml") \
        == "specforge contract's pytest"
    assert pc.kind("python -m pytest -m conformance contracts") == "suite's pytest"
    assert pc.kind("python -B -c from multiprocessing.resource_tracker import main;main(6)") == "engine resource tracker"
    if not pc.PROC.is_dir():
        pytest.skip("no /proc here")
    burn = ("import subprocess, sys, time; subprocess.run([sys.executable, '-c', 'import time; t = time.process_time()\\n"
            "while time.process_time() - t < 1.0: pass\\ntime.sleep(1)', 'sglang::' + 'detokenizer'])")
    sampler = pc.TreeSampler(interval=0.1).start()
    proc = subprocess.Popen([sys.executable, "-c", burn])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)", "sglang::scheduler"])
    proc.wait()
    idle.wait()
    sampler.stop()
    kinds = dict(pc.by_kind(sampler.seen.values()))
    assert kinds["engine detokenizer"][0] >= 0.8 and kinds["engine detokenizer"][1] == 1
    assert kinds["engine scheduler"][0] < 0.5
    assert "engine detokenizer 1 s (1)" in sampler.report()


def _unpatched(monkeypatch):
    spec = importlib.util.spec_from_file_location("main_job_caches", REPO / "scripts" / "main_job.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    built: list[str] = []
    import eagle3_conformance.testbed.fixtures as fixtures

    monkeypatch.setattr(fixtures, "build_fixture", built.append)
    return mod, built


def test_shared_caches_builds_the_bf16_pair_beside(monkeypatch, tmp_path, capsys):
    """The first run: smollm2-135m here and smollm2-135m-bf16 in a second process at the same time (the second
    process here writes its start time; this one checks it started before its own build returned)."""
    mod, built = _unpatched(monkeypatch)
    mark = tmp_path / "bf16"
    monkeypatch.setattr(mod, "_BF16", f"import pathlib, time; pathlib.Path({str(mark)!r}).write_text(str(time.time()))")
    import eagle3_conformance.testbed.fixtures as fixtures

    def build(name):
        built.append(name)
        deadline = time.time() + 30
        while not mark.exists() and time.time() < deadline:  # the bf16 build runs while this one does
            time.sleep(0.05)
        assert mark.exists()

    monkeypatch.setattr(fixtures, "build_fixture", build)
    mod.shared_caches()
    assert built == ["smollm2-135m"]
    assert capsys.readouterr().out == ""


def test_a_failed_bf16_build_is_one_line_and_left_to_the_suite(monkeypatch, tmp_path, capsys):
    """The fault a user causes: a model cache inside the checkout (CONFORMANCE_MODEL_CACHE); the real bf16
    build refuses it (FixtureError) and the main job says so in one line, no traceback, and goes on."""
    mod, built = _unpatched(monkeypatch)
    monkeypatch.setenv("CONFORMANCE_MODEL_CACHE", str(REPO / "fixtures" / "_build" / "model-cache-in-repo"))
    monkeypatch.setenv("CONFORMANCE_FIXTURE_CACHE", str(tmp_path / "fixtures"))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    mod.shared_caches()
    out = capsys.readouterr().out
    assert built == ["smollm2-135m"]
    assert out.startswith("main job: building smollm2-135m-bf16 ahead failed (exit 1): model cache "), out
    assert "is inside the repository" in out and out.endswith("; the suite builds it again\n"), out
    assert "Traceback" not in out and out.count("\n") == 1


def test_lane_2_runs_niced_so_the_suite_s_lane_gets_the_cores_first(job, tmp_path):
    """Lane 2 (SpecForge contract, kill matrices) ends before the suite's lane: its commands run at niceness
    ``LANE2_NICE`` (their children inherit it), the suite's at the default."""
    import os

    probe = [sys.executable, "-c", "import os, time; time.sleep(0.5); print(os.nice(0))"]
    results: dict = {}
    job._run_kept(probe, results)
    code, _, out, _ = results[id(probe)]
    assert job.LANE2_NICE > 0 and code == 0
    assert int(out.split()[-1]) == job.LANE2_NICE or os.nice(0) >= job.LANE2_NICE  # (already as nice: left)
    with open(tmp_path / "out", "w") as f:
        assert job.call(probe, stdout=f)[0] == 0
    assert int((tmp_path / "out").read_text()) == os.nice(0)
