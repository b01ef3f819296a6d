"""The engine processes' start-up (eagle3_conformance.tools.sglang_engine.bootstrap): what each process of
an engine start does once, not once per process (issue 42 item 4: CPU seconds of the main job)."""

from __future__ import annotations

import gc

import pytest

from eagle3_conformance.tools.sglang_engine import bootstrap, guards, patches, sgl_kernel_standin


@pytest.fixture
def counted_guards(monkeypatch):
    """``guards.check_all`` counted (and the stand-ins' installs left out): how often the guards ran."""
    calls: list[int] = []
    monkeypatch.setattr(guards, "check_all", lambda guarded=None: calls.append(1))
    monkeypatch.setattr(sgl_kernel_standin, "install", lambda: None)
    monkeypatch.setattr(patches, "install", lambda: None)
    monkeypatch.delenv(bootstrap.GUARDED_ENV, raising=False)
    return calls


def test_the_guards_run_once_per_process_tree(counted_guards, monkeypatch):
    """The driver checks (its start-up hook, then again before SGLang starts: once); the processes SGLang
    spawns inherit the stamp and skip; a stamp of another install or release is checked again."""
    bootstrap.install_standins()
    bootstrap.install_standins()
    assert counted_guards == [1]
    assert bootstrap.os.environ[bootstrap.GUARDED_ENV] == f"{guards.SGLANG_VERSION}:{guards.sglang_root()}"
    monkeypatch.setenv(bootstrap.GUARDED_ENV, f"0.5.22:{guards.sglang_root()}")
    bootstrap.install_standins()
    assert len(counted_guards) == 2


def test_a_tripped_guard_leaves_no_stamp(monkeypatch):
    """A guard that trips raises, sets nothing: the next process checks again (and refuses again)."""
    def trip(guarded=None):
        raise guards.GuardError("changed")

    monkeypatch.setattr(guards, "check_all", trip)
    monkeypatch.delenv(bootstrap.GUARDED_ENV, raising=False)
    with pytest.raises(guards.GuardError):
        bootstrap.install_standins()
    assert bootstrap.GUARDED_ENV not in bootstrap.os.environ


def test_each_driver_runs_the_guards_itself(monkeypatch):
    """A stamp in the caller's environment never reaches a driver: each engine start checks."""
    from eagle3_conformance.tools.sglang_engine.launch import child_env

    monkeypatch.setenv(bootstrap.GUARDED_ENV, bootstrap.guard_stamp())
    assert bootstrap.GUARDED_ENV not in child_env("cpu")
    assert bootstrap.GUARDED_ENV not in child_env("cuda")


def test_engine_built_freezes_the_collector_in_the_engine_tools_processes_only(monkeypatch):
    """``gc.freeze()`` in the engine tool's own processes (SGLang's CPU flush_cache runs a full collection on
    every flush); a user's own server loading the recorder (serve-hooks) is left alone."""
    gc.unfreeze()
    try:
        monkeypatch.delenv(bootstrap.ENGINE_ENV, raising=False)
        bootstrap.engine_built()
        assert gc.get_freeze_count() == 0
        monkeypatch.setenv(bootstrap.ENGINE_ENV, "1")
        bootstrap.engine_built()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_the_recorders_factory_marks_the_engine_built(tmp_path, monkeypatch):
    """SGLang calls the recorder's factory once a model runner is built (hook_manager.py): that is the call
    that freezes the collector in the scheduler."""
    from eagle3_conformance.tools.sglang_engine import hooks

    seen: list[int] = []
    monkeypatch.setattr(bootstrap, "engine_built", lambda: seen.append(1))
    hooks.draft_input_recorder({"out_dir": str(tmp_path)})
    assert seen == [1]


def test_an_engine_process_starts_with_rare_collections_and_gets_the_defaults_back_once_built(monkeypatch):
    """From the start-up hook to :func:`engine_built` the collector runs at ``START_THRESHOLDS`` (the imports'
    objects all live); once the engine is built, the thresholds the process had are back."""
    from eagle3_conformance.environment import torch_env

    before = gc.get_threshold()
    monkeypatch.setattr(torch_env, "prepare", lambda: None)
    monkeypatch.setenv(bootstrap.ENGINE_ENV, "1")
    monkeypatch.delenv(bootstrap.STANDINS_ENV, raising=False)
    try:
        bootstrap.process_start()
        assert gc.get_threshold() == bootstrap.START_THRESHOLDS != before
        bootstrap.engine_built()
        assert gc.get_threshold() == before
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
        bootstrap._thresholds.clear()
