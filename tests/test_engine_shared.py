"""One sglang.Engine start for several callers' phases (issue 42 item 4, tools/sglang_engine/shared.py): callers
of the same configuration that ask before the engine is up share its start; each gets back only its own
outputs and records, by request id; other configurations, late callers and colliding request ids get their own
start; a failure is every member's; the engine is killed only when every member withdrew. The engine here is a
stand-in of the driver's side of the hand-over (a sleeping process group, records written as the recorder
writes them); the real engine's runs are compared with and without sharing in the slow tier
(test_the_sglang_engine_batch_sees_the_same_with_and_without_sharing)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from eagle3_conformance.tools.sglang_engine import shared
from eagle3_conformance.tools.sglang_engine.launch import EngineRun, EngineRunError
from tests.test_engine_ahead import _gone


class FakeEngine:
    """``run_engine`` as the driver answers a shared run: start a process group, call ``started``, write the
    ready file after ``start_s``, wait for the phases, write per phase one target EXTEND record with the
    phase's request ids, a logits runtime record after it (no ids), and one draft_model record; outputs
    carry ``rid`` and ``phase``."""

    def __init__(self, start_s: float = 0.3, fail: bool = False) -> None:
        self.calls: list[dict] = []
        self.start_s, self.fail = start_s, fail
        self.pgids: list[int] = []

    def __call__(self, target_dir, draft_dir, prompts, *, workdir, extra, started=None, **kw):
        call = {"target_dir": target_dir, "extra": extra, "workdir": Path(workdir), **kw}
        self.calls.append(call)
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        self.pgids.append(proc.pid)
        started(proc)
        end = time.monotonic() + self.start_s
        while time.monotonic() < end and proc.poll() is None:  # starting (killed: over at once)
            time.sleep(0.02)
        Path(extra["ready_file"]).write_text("1")
        while not Path(extra["phases_file"]).exists():
            if proc.poll() is not None:
                raise EngineRunError("killed", "")
            time.sleep(0.02)
        phases = json.loads(Path(extra["phases_file"]).read_text())
        call["phases"] = phases
        proc.kill()
        proc.wait()
        if self.fail:
            raise EngineRunError("sglang.Engine generation failed: boom", "log tail")
        rec_dir = Path(workdir) / "records"
        (rec_dir / "runtime").mkdir(parents=True)
        (rec_dir / "factory-7-0.json").write_text("{}")
        n = 0
        torch.save({"kind": "draft_model", "dtype": "torch.float32"}, rec_dir / "runtime" / f"7-{n:06d}.pt")
        outputs, timings = [], {"start_s": 1.0, "wall_s": 10.0}
        for ph in phases:
            n += 1
            torch.save({"role": "target", "mode": "EXTEND", "rids": list(ph["rids"]), "phase": ph["name"]},
                       rec_dir / f"7-{n:06d}.pt")
            n += 1
            torch.save({"kind": "logits", "phase": ph["name"]}, rec_dir / "runtime" / f"7-{n:06d}.pt")
            outputs += [{"output_ids": [1] * ph["max_new_tokens"], "meta_info": {}, "rid": r, "phase": ph["name"]}
                        for r in ph["rids"]]
            timings[f"phase {ph['name']}_s"] = 2.0
        return EngineRun(outputs, timings, rec_dir, "0.5.23", "", {"phases": "late"}, proc.pid)


def _phase(name: str, n: int = 2, **kw) -> dict:
    return {"name": name, "prompts": [[1, 2, 3]] * n, "rids": [f"{name}/{i}" for i in range(n)], **kw}


def _ask(results: dict, name: str, phases: list, tmp_path: Path, **config):
    def go():
        try:
            results[name] = shared.run_shared("t", "d", phases, name=name, workdir=tmp_path / name, **config)
        except Exception as e:  # noqa: BLE001 - the test reads it
            results[name] = e
    t = threading.Thread(target=go)
    t.start()
    return t


def _records(run: EngineRun) -> list[dict]:
    d = run.records_dir
    return [torch.load(f, weights_only=True) for f in sorted(d.glob("*.pt")) + sorted((d / "runtime").glob("*.pt"))]


@pytest.fixture
def engine(monkeypatch):
    fake = FakeEngine()
    monkeypatch.setattr(shared, "run_engine", fake)
    monkeypatch.setattr(shared, "_OPEN", {})
    return fake


def test_callers_of_one_configuration_share_one_start_and_get_only_their_own(engine, tmp_path):
    results: dict = {}
    threads = [_ask(results, "engine", [_phase("engine", 4)], tmp_path, max_new_tokens=32),
               _ask(results, "inv", [_phase("plain", flush_each=True), _phase("batch")], tmp_path, max_new_tokens=8)]
    for t in threads:
        t.join(30)
    assert len(engine.calls) == 1  # one engine start
    call = engine.calls[0]
    assert call["record_kv"] is True and call["reference"] is None and call["extra_hooks"] is None
    assert [p["name"] for p in call["phases"]] == ["engine", "plain", "batch"]  # in the order they asked
    assert [p.get("flush", False) for p in call["phases"]] == [True, True, False]  # each member's first flushes
    assert [p["max_new_tokens"] for p in call["phases"]] == [32, 8, 8]
    eng, inv = results["engine"], results["inv"]
    assert [o["rid"] for o in eng.outputs] == [f"engine/{i}" for i in range(4)]
    assert all(len(o["output_ids"]) == 32 for o in eng.outputs)
    assert [o["phase"] for o in inv.outputs] == ["plain", "plain", "batch", "batch"]
    for run, own in ((eng, {"engine"}), (inv, {"plain", "batch"})):
        recs = _records(run)
        assert {r["phase"] for r in recs if "phase" in r} == own  # its records, the logits after them, no other's
        assert sum(r.get("kind") == "draft_model" for r in recs) == 1  # the engine's own facts: everyone's
        assert (run.records_dir / "factory-7-0.json").is_file()
        assert run.records_dir.parent == tmp_path / ("engine" if run is eng else "inv")
    assert eng.spec["shared_with"] == ["inv"] and inv.spec["shared_with"] == ["engine"]
    assert eng.timings["wall_s"] == 10.0 - 4.0 and inv.timings["wall_s"] == 10.0 - 2.0  # less the others' phases
    assert "phase plain_s" not in eng.timings and inv.timings["generate_s"] == 4.0
    assert not call["workdir"].exists()  # the shared folder is gone once the members have their runs


@pytest.mark.parametrize("other", [{"reference": {"boundaries": ["B_1"]}}, {"extra_hooks": [{"name": "fault"}]},
                                   {"extra": {"engine_extra": {"chunked_prefill_size": 16}}}, {"dtype": "bfloat16"},
                                   {"draft": "another draft"}])
def test_other_hooks_or_engine_arguments_never_share(engine, tmp_path, other):
    results: dict = {}
    draft = other.pop("draft", "d")
    t1 = _ask(results, "a", [_phase("a")], tmp_path)

    def go():
        results["b"] = shared.run_shared("t", draft, [_phase("b")], name="b", workdir=tmp_path / "b", **other)
    t2 = threading.Thread(target=go)
    t2.start()
    t1.join(30)
    t2.join(30)
    assert len(engine.calls) == 2 and all(len(c["phases"]) == 1 for c in engine.calls)
    assert [o["rid"] for o in results["b"].outputs] == ["b/0", "b/1"]


def test_empty_extras_ask_for_what_none_asks_for(engine, tmp_path):
    results: dict = {}
    ts = [_ask(results, "a", [_phase("a")], tmp_path, extra=None, extra_hooks=None),
          _ask(results, "b", [_phase("b")], tmp_path, extra={}, extra_hooks=[])]
    for t in ts:
        t.join(30)
    assert len(engine.calls) == 1


def test_a_caller_after_the_engine_is_up_or_with_the_same_request_ids_gets_its_own_start(engine, tmp_path):
    results: dict = {}
    t1 = _ask(results, "a", [_phase("a")], tmp_path)
    t2 = _ask(results, "a2", [{**_phase("x"), "rids": ["a/0", "a/1"]}], tmp_path)  # a's request ids
    t1.join(30)
    t3 = _ask(results, "late", [_phase("late")], tmp_path)
    t2.join(30)
    t3.join(30)
    assert len(engine.calls) == 3
    assert [o["rid"] for o in results["late"].outputs] == ["late/0", "late/1"]


def test_a_failure_is_every_members_error(monkeypatch, tmp_path):
    monkeypatch.setattr(shared, "run_engine", FakeEngine(fail=True))
    monkeypatch.setattr(shared, "_OPEN", {})
    results: dict = {}
    for t in [_ask(results, "a", [_phase("a")], tmp_path), _ask(results, "b", [_phase("b")], tmp_path)]:
        t.join(30)
    assert all(isinstance(results[k], EngineRunError) and "boom" in str(results[k]) for k in "ab")


def test_a_record_of_no_member_is_an_error_never_a_guess(engine, tmp_path, monkeypatch):
    real = engine.__call__

    def foreign(*a, **kw):
        run = real(*a, **kw)
        torch.save({"role": "target", "mode": "EXTEND", "rids": ["someone/0"]}, run.records_dir / "7-000099.pt")
        return run
    monkeypatch.setattr(shared, "run_engine", foreign)
    with pytest.raises(ValueError, match="someone/0.*no single member"):
        shared.run_shared("t", "d", [_phase("a")], name="a", workdir=tmp_path / "a")


def test_the_engine_is_killed_only_when_every_member_withdrew(monkeypatch, tmp_path):
    from eagle3_conformance.tools.sglang_engine import ahead

    fake = FakeEngine(start_s=60)  # an engine that is still starting
    monkeypatch.setattr(shared, "run_engine", fake)
    monkeypatch.setattr(shared, "_OPEN", {})
    jobs = [ahead.Job(shared.run_shared, "t", "d", [_phase(n)], name=n) for n in ("a", "b")]
    deadline = time.monotonic() + 30
    while (not fake.pgids or len(jobs[1]._procs) < 1 or len(jobs[0]._procs) < 1) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(fake.pgids) == 1
    jobs[0].discard()
    assert not _gone(fake.pgids[0])  # b still wants it
    jobs[1].discard()
    assert _gone(fake.pgids[0])


def test_a_phase_without_request_ids_is_refused(engine, tmp_path):
    with pytest.raises(ValueError, match="request id"):
        shared.run_shared("t", "d", [{"name": "a", "prompts": [[1]], "rids": []}], name="a", workdir=tmp_path)
    assert engine.calls == []


def test_the_driver_hands_over_late_phases_once_the_engine_is_up(tmp_path):
    from eagle3_conformance.tools.sglang_engine.driver import late_phases

    spec = {"ready_file": str(tmp_path / "ready"), "phases_file": str(tmp_path / "phases.json")}
    got: list = []
    t = threading.Thread(target=lambda: got.append(late_phases(spec, poll_s=0.01)))
    t.start()
    deadline = time.monotonic() + 10
    while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (tmp_path / "ready").exists() and t.is_alive()  # up, and waiting for its phases
    (tmp_path / "phases.json").write_text(json.dumps([_phase("a")]))
    t.join(10)
    assert got == [[_phase("a")]]


def test_a_phase_says_its_own_new_tokens():
    from eagle3_conformance.tools.sglang_engine.driver import run_phase

    seen: list = []

    class Engine:
        def generate(self, input_ids, sampling_params, rid, **kw):
            seen.append(sampling_params["max_new_tokens"])
            return [{"output_ids": [1], "meta_info": {}} for _ in input_ids]

    spec = {"max_new_tokens": 8}
    run_phase(Engine(), spec, _phase("a", max_new_tokens=32))
    run_phase(Engine(), spec, _phase("b"))
    assert seen == [32, 8]


@pytest.mark.slow
def test_the_sglang_engine_batch_sees_the_same_with_and_without_sharing(tmp_path):
    """The real SmolLM2 pair (two engine starts, one after the other; about 60 s of CPU on the 2-core machine):
    the sglang-engine path's batch on an engine of its own (run_engine's plain batch, as before sharing) and as
    one phase of an engine shared with the invariance base run (batch + input-logprobs phases after it) hand the
    draft the same tensors, give the same SGLang counters and greedy outputs, and the path's findings are the
    same, check by check; the shared run was shared (one start), and the invariance member's pairs still pass."""
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.paths import sglang_engine as path_mod
    from eagle3_conformance.paths.sglang_engine_invariance import NAME, observation
    from eagle3_conformance.suite.assess import assess, reference_loader
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft, eval_prompts
    from eagle3_conformance.tools.sglang_engine import observe_engine
    from eagle3_conformance.tools.sglang_engine.variations import run_variations

    root = Path(__file__).resolve().parent.parent
    c = load_contract(root / "contracts" / "smollm2-135m.yaml")
    t = ensure_trained_draft(RECIPE)
    prompts = eval_prompts(t.target_dir, 4, 48)

    def findings(obs):
        o = path_mod.first(path_mod._State(c, obs, draft_dir=t.draft_dir))
        return [(f.check, f.status, f.where, f.slot, str(f.observed)) for f in
                assess(c, o, reference_loader(c, t.target_dir), path=path_mod.PATH_NAME)]

    alone = observe_engine(t.target_dir, t.draft_dir, prompts, max_new_tokens=32, workdir=tmp_path / "alone")
    got: dict = {}
    inv = threading.Thread(target=lambda: got.update(inv=run_variations(
        t.target_dir, t.draft_dir, prompts[:2], names=["batch", "input-logprobs"], path=NAME, workdir=tmp_path / "inv",
        share=True)))
    inv.start()
    both = observe_engine(t.target_dir, t.draft_dir, prompts, max_new_tokens=32, workdir=tmp_path / "shared",
                          share=path_mod.PATH_NAME)
    inv.join(600)
    assert both.run.spec["shared_with"] == [NAME]  # one engine start served both
    assert [o["output_ids"] for o in both.run.outputs] == [o["output_ids"] for o in alone.run.outputs]
    assert both.acceptance == alone.acceptance and both.lossless == alone.lossless
    for a, b in ((alone.extend, both.extend), (alone.decode, both.decode)):
        assert len(a) == len(b) > 0
        for x, y in zip(a, b):
            assert (x.where, x.provenance.get("accepted")) == (y.where, y.provenance.get("accepted"))
            assert torch.equal(x.token_ids, y.token_ids) and torch.equal(x.rows, y.rows)
            assert torch.equal(x.feature, y.feature)
    assert findings(both) == findings(alone)
    vobs = got["inv"]
    assert vobs.failed == {} and set(vobs.timings) == {"base"}

    def no_reference():
        raise AssertionError("the invariance checks need no reference model")

    found = assess(c, observation(vobs, ["batch", "input-logprobs"]), no_reference, path=NAME)
    assert [f for f in found if f.status == "fail"] == []
    assert {f.where.split(":")[0] for f in found if f.check == "engine_invariance" and f.status == "pass"} == {
        "batch", "input-logprobs"}


def test_the_side_by_side_script_alternates_checkouts_and_refuses_a_missing_one(tmp_path, monkeypatch, capsys):
    """scripts/engine_paths_cpu.py (the figures of docs/timings.md's shared engine start): A, B, A, B with
    --rounds 2; the first failing run's status; a checkout without the contract is bad input (2)."""
    import importlib.util

    repo = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("engine_paths_cpu", repo / "scripts" / "engine_paths_cpu.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        (d / "contracts").mkdir(parents=True)
        (d / mod.CONTRACT).write_text("")
    seen: list = []
    monkeypatch.setattr(mod, "run", lambda c: (seen.append(c.name), (3 if c.name == "b" else 0, f"ran {c.name}"))[1])
    assert mod.main([str(a), str(b), "--rounds", "2"]) == 3
    assert seen == ["a", "b", "a", "b"] and capsys.readouterr().out.split() == ["ran", "a", "ran", "b"] * 2
    assert mod.main([str(tmp_path / "none")]) == 2
    assert "no such file" in capsys.readouterr().err
