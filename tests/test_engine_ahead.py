"""The real engine's run started ahead of its turn (issue 42, the main job's time): the job runs the same
``run_engine`` call in the background, hands back its result or error, and never outlives the session (a
cancelled or abandoned job kills the engine's process group); the sglang-engine path's ``prepare`` takes
the job ``warm`` started for the same run, and the plugin starts it once the items are chosen."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from eagle3_conformance.paths import sglang_engine as path_mod
from eagle3_conformance.paths.base import Needs, Path, Skipped
from eagle3_conformance.suite.session import warm_paths
from eagle3_conformance.tools.sglang_engine import ahead
from eagle3_conformance.tools.sglang_engine.launch import EngineRun, EngineStartError

pytest_plugins = ["pytester"]


def _gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _sleeping_engine(record: dict, seconds: float = 60):
    """A stand-in for run_engine: starts a process group that sleeps (as an engine that is still
    starting), hands it to ``started`` and waits for it, as run_engine does."""
    def fake(target_dir, draft_dir, prompts, *, workdir, started=None, **kw):
        record.update(target_dir=target_dir, draft_dir=draft_dir, prompts=prompts, workdir=workdir, **kw)
        proc = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"], start_new_session=True)
        record["pgid"] = proc.pid
        if started:
            started(proc)
        code = proc.wait()
        if code != 0:
            raise EngineStartError(f"sglang.Engine did not start: the engine process exited with status {code}", "")
        return EngineRun([{"output_ids": [1]}], {"wall_s": seconds}, None, "0.5.23")
    return fake


def test_a_job_runs_run_engine_with_its_arguments_and_returns_its_run(monkeypatch):
    seen: dict = {}
    monkeypatch.setattr(ahead, "run_engine", _sleeping_engine(seen, seconds=0.2))
    job = ahead.EngineJob("t", "d", [[1, 2]], dtype="float32", max_new_tokens=4)
    run = job.result()
    assert run.outputs == [{"output_ids": [1]}]
    assert seen["target_dir"] == "t" and seen["prompts"] == [[1, 2]] and seen["max_new_tokens"] == 4
    assert seen["workdir"] == job.workdir and job.workdir.is_dir()
    job.discard()
    assert not job.workdir.exists()


def test_a_cancelled_job_kills_the_engine_group_and_reports_the_error(monkeypatch):
    seen: dict = {}
    monkeypatch.setattr(ahead, "run_engine", _sleeping_engine(seen))
    job = ahead.EngineJob("t", "d", [[1]])
    deadline = time.monotonic() + 30
    while "pgid" not in seen and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _gone(seen["pgid"])
    t0 = time.monotonic()
    job.discard()
    assert _gone(seen["pgid"]) and time.monotonic() - t0 < 30  # killed, not waited out
    with pytest.raises(EngineStartError):
        job.result()


def test_prepare_takes_the_run_warm_started_and_only_that_one(monkeypatch):
    """warm starts the run prepare would make; prepare hands that job to observe_engine (no second
    engine); a contract whose run differs gets its own run, and the leftover job is discarded."""
    from eagle3_conformance.tools import sglang_engine as tool

    run = path_mod._Run("t", "d", [[1, 2]], "float32", "", 32, "cpu", None, None)
    started, observed, discarded = [], [], []

    class Job:
        def discard(self):
            discarded.append(self)

    monkeypatch.setattr(path_mod, "_planned", lambda c, pair: run)
    monkeypatch.setattr(tool, "start_engine", lambda *a, **k: (started.append((a, k)), Job())[1])
    monkeypatch.setattr(tool, "observe_engine", lambda *a, job=None, **k: (observed.append((a, k, job)),
                                                                           pytest.skip("stop here"))[1])
    monkeypatch.setattr(path_mod, "_AHEAD", {})
    discard = path_mod.warm(object(), object())
    assert len(started) == 1 and started[0][0] == ("t", "d", [[1, 2]]) and started[0][1] == run.kwargs()
    assert path_mod.warm(object(), object()) is None  # the same run is started once
    with pytest.raises(pytest.skip.Exception):
        path_mod.prepare(object(), object())
    (args, kw, job), = observed
    assert job is not None and args == ("t", "d", [[1, 2]]) and {k: kw[k] for k in run.kwargs()} == run.kwargs()
    assert path_mod._AHEAD == {}  # taken
    discard()
    assert discarded == [job]  # the plugin's discard at the end of the session: no engine left behind


def test_warm_paths_starts_each_run_once_leaves_unmet_paths_and_swallows_errors():
    from types import SimpleNamespace

    calls = []

    def warm(c, pair):
        calls.append(c.name)
        if c.name == "boom":
            raise RuntimeError("prepare reports it")
        return lambda: calls.append(("discard", c.name))

    p = Path("p", "", Needs(), prepare=lambda c, pair: Skipped(""), warm=warm)
    unmet = Path("q", "", Needs(modules=("no_such_module_here",)), prepare=lambda c, pair: Skipped(""), warm=warm)
    none = Path("r", "", Needs(), prepare=lambda c, pair: Skipped(""))

    class Pair:
        target_dir = None
        draft_dir = None
        data_dir = None

    def c(name):
        return SimpleNamespace(name=name, method="eagle3")

    discards = warm_paths([(p, c("a"), Pair()), (unmet, c("b"), Pair()), (none, c("c"), Pair()),
                           (p, c("boom"), Pair())])
    assert calls == ["a", "boom"] and len(discards) == 1
    discards[0]()
    assert calls[-1] == ("discard", "a")


def test_the_plugin_starts_the_engine_path_ahead_and_not_for_collect_only(pytester, monkeypatch):
    """With the engine path selected, the plugin warms it once the items are chosen (before the first
    item runs) and discards what was not taken at the end; --collect-only starts nothing."""
    import shutil
    from pathlib import Path as FsPath

    import eagle3_conformance.paths as reg

    # the conftest below replaces the training path in this process's registry: put it back afterwards,
    # or every later in-process run of the training path is skipped ("prepared")
    monkeypatch.setitem(reg.REGISTRY, "training", reg.REGISTRY["training"])
    repo = FsPath(__file__).resolve().parent.parent
    shutil.copy(repo / "contracts" / "tiny-llama.yaml", pytester.path / "c.yaml")
    log = pytester.path / "log.txt"
    pytester.makeconftest(f"""
import eagle3_conformance.paths as reg
from dataclasses import replace

def _warm(c, pair):
    open({str(log)!r}, "a").write("warm " + c.name + "\\n")
    return lambda: open({str(log)!r}, "a").write("discard\\n")

def pytest_configure(config):  # the training path, run no further than its warm (prepare: a skip)
    reg.REGISTRY["training"] = replace(reg.REGISTRY["training"], warm=_warm,
                                       prepare=lambda c, pair: reg.Skipped("prepared"))

def pytest_runtest_setup(item):
    open({str(log)!r}, "a").write("run " + item.name + "\\n")
""")
    r = pytester.runpytest_inprocess("-m", "conformance", "-p", "no:randomly", "--contract", "c.yaml",
                                     "--conformance-paths", "training", "--collect-only", "-q")
    assert r.ret == 0 and not log.exists()
    r = pytester.runpytest_inprocess("-m", "conformance", "-p", "no:randomly", "--contract", "c.yaml",
                                     "--conformance-paths", "training", "-q")
    assert r.ret == pytest.ExitCode.NO_TESTS_COLLECTED, r.stdout.str()  # its one path skipped: nothing checked
    assert log.read_text().splitlines() == ["warm tiny-llama-eagle3", "run training", "discard"]


def test_a_cancelled_job_kills_the_engine_running_and_each_one_started_after():
    """A job whose function starts engines one after the other (run_variations: the base run, then the
    chunked one): cancel kills the one running, and the next is killed as it starts."""
    seen: list = []

    def two_engines(*, workdir, started):
        for _ in range(2):
            proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
            seen.append(proc.pid)
            started(proc)
            proc.wait()
        return "both ran"

    job = ahead.Job(two_engines)
    deadline = time.monotonic() + 30
    while not seen and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    job.discard()
    assert len(seen) == 2 and all(_gone(p) for p in seen) and time.monotonic() - t0 < 30
    assert job.result() == "both ran"  # each wait ended with the kill, not the 60 s


def test_invariance_prepare_takes_the_runs_warm_started_and_only_those(monkeypatch):
    """sglang-engine-invariance's warm starts run_variations with prepare's arguments; prepare takes that job
    (no second engine), returns its observation and discards it; a second warm of the same plan starts nothing."""
    from eagle3_conformance.paths import sglang_engine_invariance as inv
    from eagle3_conformance.tools.sglang_engine import variations

    plan = inv._Plan("t", "d", [[1, 2]], ("batch",), 8, "cpu", "float32", "")
    calls: list = []

    def fake_run_variations(target_dir, draft_dir, prompts, *, workdir, started=None, **kw):
        calls.append((target_dir, draft_dir, prompts, kw, started is not None))
        return "observed"

    monkeypatch.setattr(inv, "_planned", lambda c, pair: plan)
    monkeypatch.setattr(variations, "run_variations", fake_run_variations)
    monkeypatch.setattr(inv, "_AHEAD", {})
    discard = inv.warm(object(), object())
    assert discard is not None and inv.warm(object(), object()) is None
    state = inv.prepare(object(), object())
    assert state.observation == "observed" and state.names == ["batch"] and inv._AHEAD == {}
    assert calls == [("t", "d", [[1, 2]], plan.kwargs(), True)]  # one run, the ahead job's (started= handed)
    discard()  # the session's discard after prepare took it: nothing left, nothing raised
    monkeypatch.setattr(inv, "_AHEAD", {})
    assert inv.prepare(object(), object()).observation == "observed" and len(calls) == 2  # not warmed: its own run
    assert calls[1][4] is False


def test_the_plugin_prints_each_path_s_seconds_when_asked(pytester):
    """--conformance-durations: one line after the report, each path's seconds (a skipped path's too)."""
    import shutil
    from pathlib import Path as FsPath

    repo = FsPath(__file__).resolve().parent.parent
    shutil.copy(repo / "contracts" / "tiny-llama.yaml", pytester.path / "c.yaml")
    args = ["-m", "conformance", "-p", "no:randomly", "--contract", "c.yaml", "--conformance-paths",
            "vllm-engine,sglang-mtp,sglang-engine", "-q"]
    r = pytester.runpytest_subprocess(*args, "--conformance-durations")
    line, = [x for x in r.outlines if x.startswith("seconds per path: ")]
    assert "vllm-engine " in line and "sglang-mtp " in line and "; total " in line
    # sglang-engine starts its run ahead: its seconds are marked as the wait only
    assert re.search(r"sglang-engine \d+\.\d\*", line) and line.endswith("; * started ahead, in the background: the wait for its run only")
    assert not [x for x in pytester.runpytest_subprocess(*args).outlines if x.startswith("seconds per path")]


def test_the_kill_matrix_s_seconds_per_column_sum_its_scenarios():
    from eagle3_conformance.faults.render import column_seconds

    m = {"paths": ("training", "sglang-extend"), "timings": {
        "build base": 5.0, "base training": 1.0, "final training": 2.0, "base sglang-extend": 4.0,
        "harness builds": 9.0, "total": 20.0}}
    assert column_seconds(m) == {"sglang-extend": 4.0, "training": 3.0}
    assert list(column_seconds(m)) == ["sglang-extend", "training"]  # the slowest first


def test_a_cancelled_job_kills_every_engine_running_at_once():
    """run_variations starts its engine runs together, each handing its process to ``started`` from its own
    thread: cancel kills every one of them, not only the last one handed."""
    import threading

    seen: list = []

    def two_engines_at_once(*, workdir, started):
        def one():
            proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
            seen.append(proc.pid)
            started(proc)
            proc.wait()
        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return "both ran"

    job = ahead.Job(two_engines_at_once)
    deadline = time.monotonic() + 30
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    job.discard()
    assert len(seen) == 2 and all(_gone(p) for p in seen) and time.monotonic() - t0 < 30
    assert job.result() == "both ran"


def test_run_variations_runs_its_engines_one_at_a_time_and_takes_them_in_order(monkeypatch, tmp_path):
    """The base run and the chunked run never load at once (SGLang's memory profiling counts an engine
    loading beside it as its own weights and refuses to start: tools/sglang_engine/variations.py); a
    failed chunked run is still noted as unavailable, a failed base run is still raised. Started together
    (the code of 09ea443) the two runs overlap and this test fails."""
    import threading

    from eagle3_conformance import tools
    from eagle3_conformance.tools.sglang_engine import EngineStartError, launch, variations

    lock = threading.Lock()
    running: list = []
    overlap: list = []
    started: list = []

    def fake_run_engine(target_dir, draft_dir, prompts, *, workdir, extra, fail=(), **kw):
        run = workdir.name
        with lock:
            started.append(run)
            running.append(run)
            overlap.append(len(running))
        time.sleep(0.3)  # long enough for a run started beside it to be seen
        with lock:
            running.remove(run)
        if run in fail:
            raise EngineStartError(f"{run} refused", "")
        (workdir / "records").mkdir(parents=True)
        return launch.EngineRun([], {"wall_s": 1.0}, workdir / "records", "0.5.23")

    monkeypatch.setattr(tools.sglang_engine, "run_engine", lambda *a, **kw: fake_run_engine(*a, fail=("chunked",), **kw))
    vobs = variations.run_variations("t", "d", [[1] * 48, [2] * 48], names=["batch", "chunked-prefill"],
                                     workdir=tmp_path / "a")
    assert started == ["base", "chunked"] and max(overlap) == 1 and "chunked-prefill" in vobs.unavailable
    assert "base" in vobs.timings
    monkeypatch.setattr(tools.sglang_engine, "run_engine", lambda *a, **kw: fake_run_engine(*a, fail=("base",), **kw))
    with pytest.raises(EngineStartError, match="base refused"):
        variations.run_variations("t", "d", [[1] * 48, [2] * 48], names=["batch", "chunked-prefill"],
                                  workdir=tmp_path / "b")


def test_the_plugin_runs_the_paths_started_ahead_after_the_others(pytester, monkeypatch):
    """The items of a path that starts its run ahead (here: the training path given a warm) run after every other
    item, each group in its collection order, so the suite works on the other paths while the engines run
    (issue 42 item 4); the unit: session.started_ahead_last."""
    import shutil
    from pathlib import Path as FsPath

    import eagle3_conformance.paths as reg
    from eagle3_conformance.suite.session import started_ahead_last

    class Item:
        def __init__(self, path):
            self.conformance_path = path

    items = [Item(p) for p in ("sglang-engine", "training", "sglang-engine-invariance", "cross-path", "server")]
    assert [i.conformance_path for i in started_ahead_last(items)] == [
        "training", "cross-path", "server", "sglang-engine", "sglang-engine-invariance"]
    monkeypatch.setitem(reg.REGISTRY, "training", reg.REGISTRY["training"])
    monkeypatch.setitem(reg.REGISTRY, "sglang-extend", reg.REGISTRY["sglang-extend"])
    repo = FsPath(__file__).resolve().parent.parent
    shutil.copy(repo / "contracts" / "tiny-llama.yaml", pytester.path / "c.yaml")
    log = pytester.path / "log.txt"
    pytester.makeconftest(f"""
import eagle3_conformance.paths as reg
from dataclasses import replace

def pytest_configure(config):
    reg.REGISTRY["training"] = replace(reg.REGISTRY["training"], warm=lambda c, pair: None,
                                       prepare=lambda c, pair: reg.Skipped("prepared"))
    reg.REGISTRY["sglang-extend"] = replace(reg.REGISTRY["sglang-extend"], prepare=lambda c, pair: reg.Skipped("prepared"))

def pytest_runtest_setup(item):
    open({str(log)!r}, "a").write(item.name + "\\n")
""")
    r = pytester.runpytest_inprocess("-m", "conformance", "-p", "no:randomly", "--contract", "c.yaml",
                                     "--conformance-paths", "training,sglang-extend", "-q")
    assert r.ret == pytest.ExitCode.NO_TESTS_COLLECTED, r.stdout.str()
    assert log.read_text().splitlines() == ["sglang-extend", "training"]
