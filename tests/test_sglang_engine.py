"""The engine tool (eagle3_conformance/tools/sglang_engine): stand-ins against SGLang's Triton twins,
guards, the stand-in module's refusals, bad input (a tripped guard, a timeout, a missing draft: exit
with the reason and SGLang's log tail, no orphaned process), and the engine against the harness."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eagle3_conformance.tools.sglang_engine import guards, sgl_kernel_standin

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def _group_gone(pgid) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow
def test_standins_match_their_triton_twins():
    """Each of the 7 ops against SGLang's own Triton kernel (TRITON_INTERPRET=1), 30 random cases,
    and an off-by-one port is caught by the same comparison."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    env.pop("SGLANG_USE_CPU_ENGINE", None)
    p = subprocess.run([PY, str(ROOT / "tests/data/standin_twins.py"), "30"], capture_output=True, text=True,
                       env=env, timeout=600)
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert line, p.stdout[-2000:] + p.stderr[-2000:]
    res = json.loads(line[-1])
    broken = res.pop("broken fill_bonus_tokens_cpu")
    assert set(res) == set(sgl_kernel_standin.MODULE_OPS)
    for op, r in res.items():
        assert r["mismatches"] == [] and r["errors"] == [], (op, r)
    assert len(broken["mismatches"]) > 0


def test_guards_hold_on_the_installed_sglang():
    from eagle3_conformance.tools.sglang_engine import bootstrap

    every = bootstrap.all_guards()
    assert every, "no guard registered: the stand-ins would run unguarded"
    guards.check_all(every)  # raises GuardError naming the first changed source; digests read off this wheel


def test_guard_trips_on_changed_source_and_version(monkeypatch):
    key = next(iter(sgl_kernel_standin.GUARDS))
    with pytest.raises(guards.GuardError, match=r"cache_move\.py:copy_all_layer_kv_cache_func changed"):
        guards.check_all({key: "0000000000000000"})
    with pytest.raises(guards.GuardError, match="not found"):
        guards.source_digest(key[0], "no_such_function")
    monkeypatch.setattr(guards.importlib.metadata, "version", lambda name: "0.5.24")
    with pytest.raises(guards.GuardError, match="SGLang 0.5.24 is installed"):
        guards.check_version()


def test_standin_module_refuses_what_it_does_not_implement():
    mod = sgl_kernel_standin.build_module()
    assert callable(mod.verify_tree_greedy_cpu)
    with pytest.raises(sgl_kernel_standin.StandInMissing, match="decode_attention_cpu"):
        mod.decode_attention_cpu(1, 2)
    ns = sgl_kernel_standin._OpsNamespace()
    assert not hasattr(ns, "convert_weight_packed")  # SGLang then takes forward_native, not AMX
    assert not hasattr(ns, "gptq_marlin_repack")  # no fake kernel registered for an absent op
    with pytest.raises(sgl_kernel_standin.StandInMissing):
        ns.rmsnorm_cpu()


def _fake_sglang(tmp_path: Path, version: str) -> Path:
    d = tmp_path / "fake"
    (d / f"sglang-{version}.dist-info").mkdir(parents=True)
    (d / f"sglang-{version}.dist-info" / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return d


def test_engine_refuses_to_start_when_a_guard_trips(tmp_path, monkeypatch):
    """Another SGLang release on the path: the driver's guard refuses before SGLang starts (exit 2
    path: EngineStartError with the reason), and the process group is gone."""
    from eagle3_conformance.tools.sglang_engine import EngineStartError, run_engine

    monkeypatch.setenv("PYTHONPATH", str(_fake_sglang(tmp_path, "0.5.24")))
    with pytest.raises(EngineStartError, match="SGLang 0.5.24 is installed") as e:
        run_engine(tmp_path / "t", tmp_path / "d", [[1, 2, 3]], workdir=tmp_path / "w", start_timeout=120)
    assert _group_gone(e.value.pgid)


def test_engine_start_timeout_reaps_the_group(tmp_path):
    from eagle3_conformance.tools.sglang_engine import EngineStartError, run_engine

    with pytest.raises(EngineStartError, match="did not finish within 2 s") as e:
        run_engine(tmp_path / "t", tmp_path / "d", [[1, 2, 3]], workdir=tmp_path / "w", start_timeout=2)
    assert _group_gone(e.value.pgid)
    # the run's TMPDIR (where SGLang leaves its ipc:// socket files) is removed with the group
    tmp = json.loads((tmp_path / "w" / "spec.json").read_text())["tmpdir"]
    assert Path(tmp).name.startswith("sgl-t-") and not Path(tmp).exists()


@pytest.mark.slow
def test_engine_refuses_a_missing_draft_with_sglangs_reason(tmp_path):
    """A draft directory without weights: SGLang's own loader error, its log tail, no orphan."""
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft
    from eagle3_conformance.tools.sglang_engine import EngineStartError, run_engine

    t = ensure_trained_draft(RECIPE)
    empty = tmp_path / "draft"
    empty.mkdir()
    (empty / "config.json").write_text((t.draft_dir / "config.json").read_text())
    with pytest.raises(EngineStartError, match="Cannot find any model weights") as e:
        run_engine(t.target_dir, empty, [[1, 2, 3]], workdir=tmp_path / "w", start_timeout=400)
    assert "Traceback" in e.value.log_tail or "Error" in e.value.log_tail
    assert _group_gone(e.value.pgid)
    assert not Path(json.loads((tmp_path / "w" / "spec.json").read_text())["tmpdir"]).exists()  # its ipc sockets too


@pytest.mark.slow
def test_engine_agrees_with_the_harness_loop(tmp_path):
    """The same prompts through the real engine and the in-process harness loop (spec_loop): the
    accept length of every verify step (but each request's last, which the token budget may cut),
    and the extend rows handed to the draft."""
    import torch

    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft, eval_prompts
    from eagle3_conformance.tools.sglang_cpu import SGLangCPUHarness
    from eagle3_conformance.tools.sglang_cpu.spec_loop import speculative_decode
    from eagle3_conformance.tools.sglang_engine import observe_engine

    t = ensure_trained_draft(RECIPE)
    prompts = eval_prompts(t.target_dir, 3, 48)
    obs = observe_engine(t.target_dir, t.draft_dir, prompts, max_new_tokens=24, workdir=tmp_path / "w")
    assert obs.lossless["engine"] == obs.lossless["reference"]
    h = SGLangCPUHarness(t.target_dir, t.draft_dir, dtype=torch.float32)
    try:
        loop = speculative_decode(h, prompts, num_draft_tokens=3, max_new_tokens=24)
        harness_extend = h.extend(prompts)
    finally:
        h.close()
    for r, run in enumerate(loop.runs):
        engine_steps = [c.provenance["accepted"] for c in obs.decode if c.provenance["request"] == r]
        assert engine_steps[:-1] == run.accept_lengths[:len(engine_steps) - 1], r
    for e, hx in zip(sorted(obs.extend, key=lambda c: c.provenance["request"]), harness_extend):
        assert torch.equal(e.token_ids, hx.token_ids)
        assert torch.allclose(e.feature.float(), hx.feature.float(), atol=1e-3, rtol=1e-3)


@pytest.mark.slow
def test_engine_kill_matrix_column(tmp_path):
    """Every fault of the sglang-engine column, caused through the draft config or directory (or the
    server's dtype), is caught by its check (or is a no-op on this pair, with the engine's own captured
    layers as proof). About 23 minutes under load 11-16 (8 faults + baseline, ~150 s each).
    The same engine runs also record the target's boundaries (the engine as its own reference,
    docs/engine-reference.md): judged against them, every run's findings equal the transformers
    reference's finding for finding, and the verdicts are the same."""
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.faults.engine_column import FAULTS, run_engine_column
    from eagle3_conformance.paths.sglang_engine import reference_config
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft, eval_prompts

    t = ensure_trained_draft(RECIPE)
    c = load_contract(ROOT / "contracts" / "smollm2-135m.yaml").model_copy(update={"reference": "engine"})
    res = run_engine_column(c, t.target_dir, t.draft_dir, eval_prompts(t.target_dir, 2, 48), tmp_path,
                            log=print, reference=reference_config(c, t.target_dir))
    print(json.dumps({k: {**v, "differ": v["differ"][:3]} for k, v in res["agreement"].items()}, default=str))
    assert {k: (v.status, v.check) for k, v in res["engine_verdicts"].items()} == \
        {k: (v.status, v.check) for k, v in res["verdicts"].items()}
    half = {f.name for f in FAULTS if f.dtype not in (None, "float32")}  # the engine records in that dtype
    for name, a in res["agreement"].items():
        if name in half:  # the same status on every finding (observed figures differ in the half-precision
            # digits) but production_precision: the engine's own bf16 records carry no precision noise against
            # themselves, the float32 transformers forward does (the engine reference cannot judge precision)
            bad = [(x, y) for x, y in a["differ"] if x[:4] != y[:4] and x[0] != "production_precision"]
            assert a["findings"] > 0 and not bad, (name, bad[:3])
            continue
        assert a["differ"] == [] and a["equal"] == a["findings"] > 0, (name, a["differ"][:3])
    assert all(v["max_rel_err"] < 1e-5 for v in res["numeric"].values()), res["numeric"]
    print(json.dumps({k: (v.status, v.check, v.detail[:200]) for k, v in res["verdicts"].items()}, indent=1))
    print(json.dumps(res["timings"]), json.dumps(res["captured"]))
    assert res["baseline_failures"] == []
    v = res["verdicts"]
    for f in FAULTS:
        assert v[f.name].status in ("caught", "noop"), (f.name, v[f.name])
        if v[f.name].status == "noop":  # only where SGLang's defaults equal the configured ids
            assert res["captured"][f.name] == res["captured"]["baseline"]
    for name in ("embedding-prepended", "ids-shifted", "ids-shifted-down", "wrong-draft-dir"):
        assert v[name].status == "caught", (name, v[name])
    # issue 45 item 2: the draft's own runtime (R89: --dtype float16 for a draft float16 cannot hold; R94: FP8
    # weights built unquantized and read raw), each caused through the server's dtype or the draft checkpoint
    assert v["draft-fp16-overflow"].check == "draft_logits_finite" and "drafts ids [0" in v["draft-fp16-overflow"].detail
    assert {"draft_logits_finite", "draft_dtype"} <= set(res["failed_checks"]["draft-fp16-overflow"])
    assert v["draft-fp8-loaded-raw"].check == "draft_quantization", v["draft-fp8-loaded-raw"]
    assert "read raw" in v["draft-fp8-loaded-raw"].detail


@pytest.mark.slow
def test_engine_refuses_an_unsupported_dtype(tmp_path):
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft
    from eagle3_conformance.tools.sglang_engine import EngineStartError, run_engine

    t = ensure_trained_draft(RECIPE)
    with pytest.raises(EngineStartError, match="did not start") as e:
        run_engine(t.target_dir, t.draft_dir, [[1, 2, 3]], dtype="int7", workdir=tmp_path / "w", start_timeout=400)
    assert "int7" in str(e.value)
    assert _group_gone(e.value.pgid)


def test_cuda_runs_the_same_code_path_without_standins():
    from eagle3_conformance.tools.sglang_engine.driver import engine_kwargs
    from eagle3_conformance.tools.sglang_engine.launch import child_env

    spec = dict(target_dir="t", draft_dir="d", num_steps=3, num_draft_tokens=4, dtype="float32", device="cuda",
                cuda_graph=True, forward_hooks=None)
    cuda, cpu = engine_kwargs(spec), engine_kwargs({**spec, "device": "cpu", "cuda_graph": False})
    assert "attention_backend" not in cuda and "device" not in cuda and cuda["disable_cuda_graph"] is False
    assert cpu["attention_backend"] == "torch_native" and cpu["disable_cuda_graph"] is True
    assert {k: v for k, v in cuda.items() if k not in cpu} == {}
    env = child_env("cuda")
    assert "EAGLE3_CONFORMANCE_SGLANG_STANDINS" not in env and "SGLANG_USE_CPU_ENGINE" not in env
    assert child_env("cpu")["EAGLE3_CONFORMANCE_SGLANG_STANDINS"] == "1"


def test_the_engine_processes_start_up_hook_skips_only_multiprocessing_s_resource_tracker():
    """site/sitecustomize.py sets up every process the engine tool starts (the driver, SGLang's scheduler and
    detokenizer, all started with ``-c`` by multiprocessing's spawn) but the resource tracker, which runs the
    standard library's own code (issue 42 item 4: 1.5 s of CPU per engine start for nothing)."""
    from eagle3_conformance.tools.sglang_engine.launch import child_env

    probe = "; import sys; print('eagle3_conformance.tools.sglang_engine.bootstrap' in sys.modules)"
    env = {**child_env("cpu"), "EAGLE3_CONFORMANCE_SGLANG_STANDINS": "0"}  # the shim alone: no guards needed here

    def set_up(code: str) -> bool:
        done = subprocess.run([sys.executable, "-B", "-c", code + probe], capture_output=True, text=True, env=env,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split()[-1] == "True"

    assert not set_up("from multiprocessing.resource_tracker import main")
    assert set_up("from multiprocessing.spawn import spawn_main")  # how SGLang's scheduler / detokenizer start


def test_graph_acceptance_is_reported_never_gated():
    """The eager-vs-graphs spread was never measured on a GPU, so no constant gates it: graphed acceptance
    far below eager is reported (skip, both figures) and the run's verdict does not fail on it."""
    import eagle3_conformance.tools.sglang_engine as engine
    from eagle3_conformance.checks import check_graph_acceptance
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.report import verdict

    c = load_contract(ROOT / "contracts" / "smollm2-135m.yaml")
    collapsed = check_graph_acceptance(c, {"eager": 1.5, "graphed": 1.0})
    assert [f.status for f in collapsed] == ["skip"]
    assert "1.000" in collapsed[0].message and "1.500" in collapsed[0].message and "not gated" in collapsed[0].message
    assert verdict(collapsed)[0] != "violations"
    # missing figures are not a judgement on noise: the run did not report what it must
    assert check_graph_acceptance(c, {"eager": 1.5, "graphed": None})[0].status == "fail"
    assert not hasattr(engine, "GRAPH_ACCEPT_NOISE")


def test_no_unmeasured_constant_is_left_in_the_package():
    """A constant marked as never measured must not sit in the package (a gate needs a measurement:
    docs/gates.md); GRAPH_ACCEPT_NOISE was one, and gated the GPU path until it was removed."""
    pkg = ROOT / "eagle3_conformance"
    marked = [f"{p.relative_to(ROOT)}:{n}" for p in pkg.rglob("*.py")
              for n, line in enumerate(p.read_text().splitlines(), 1) if "NOT measured" in line]
    assert marked == []


def test_lossless_check_names_the_first_divergence():
    from eagle3_conformance.checks import check_engine_lossless
    from eagle3_conformance.contract import load_contract

    c = load_contract(ROOT / "contracts" / "smollm2-135m.yaml")
    assert check_engine_lossless(c, {"engine": [[1, 2]], "reference": [[1, 2]]})[0].status == "pass"
    f = check_engine_lossless(c, {"engine": [[1, 2], [5, 6, 7]], "reference": [[1, 2], [5, 9, 7]]})[0]
    assert f.status == "fail" and "request 1 first at output token 1" in f.message


def test_acceptance_figures_follow_sglangs_definition():
    from eagle3_conformance.tools.sglang_engine.captures import accept_figures

    outs = [{"meta_info": {"completion_tokens": 30, "spec_verify_ct": 21, "spec_correct_drafts_histogram": [14, 6, 1]}},
            {"meta_info": {"completion_tokens": 32, "spec_verify_ct": 29, "spec_correct_drafts_histogram": [27, 2]}}]
    f = accept_figures(outs)
    assert f["spec_accept_length"] == 62 / 50  # completion tokens / verify steps (SGLANG_CPU_ENGINE.md section 3)
    assert f["spec_correct_drafts_histogram"] == [41, 8, 1]
    assert f["per_position_acceptance"] == [9 / 50, 1 / 50]


def test_main_job_judges_every_partial_acceptance_and_each_requests_ends(monkeypatch):
    import torch

    from eagle3_conformance.core.capture import Capture
    from eagle3_conformance.paths.sglang_engine import judged_decode

    def cap(r, acc):
        return Capture("sglang-engine", "", torch.zeros(1, dtype=torch.long), torch.zeros(1, 1), torch.zeros(1),
                       provenance={"request": r, "accepted": acc})
    caps = [cap(0, 1), cap(0, 1), cap(0, 3), cap(0, 1), cap(0, 1), cap(1, 1), cap(1, 2), cap(1, 1)]
    got = judged_decode(caps)
    assert [next(i for i, x in enumerate(caps) if x is c) for c in got] == [0, 2, 4, 5, 6, 7]
    monkeypatch.setenv("CONFORMANCE_ENGINE_ALL_DECODE", "1")
    assert judged_decode(caps) == caps


def test_the_engine_process_removes_only_its_own_load_snapshot_file():
    """SGLang 0.5.23 left /dev/shm/sglang_loads_<instance>_<digest>.shm after every real-engine run. The
    driver removes, after shutdown, the file SGLang's own shm_path_for names for this engine's
    port_args.instance_id, and no other (another engine's, running beside it, stays)."""
    import os
    import uuid
    from types import SimpleNamespace

    from sglang.srt.managers.load_snapshot import shm_path_for

    from eagle3_conformance.tools.sglang_engine.driver import remove_load_snapshot

    ours, other = uuid.uuid4().hex[:12], uuid.uuid4().hex[:12]
    paths = [shm_path_for(ours), shm_path_for(other)]
    assert all(p.startswith("/dev/shm/sglang_loads_") for p in paths)
    for p in paths:
        with open(p, "wb") as f:
            f.write(b"SLNS")
    try:
        res: dict = {}
        remove_load_snapshot(SimpleNamespace(port_args=SimpleNamespace(instance_id=ours)), res)
        assert not os.path.exists(paths[0]) and res["load_snapshot"] == paths[0]
        assert os.path.exists(paths[1])
        remove_load_snapshot(SimpleNamespace(port_args=SimpleNamespace(instance_id=ours)), res)  # gone: no error
        assert "load_snapshot_error" not in res
    finally:
        for p in paths:
            if os.path.exists(p):
                os.unlink(p)


def _user_pair(tmp_path, ids=None) -> Path:
    """A user's own pair: the SmolLM2 contract with the fixture replaced by target.path / draft.path
    (the float32 target in the model cache, the shipped draft copied beside the contract, its
    config's aux ids set to ``ids``: how a user breaks their own draft), acceptance not gated."""
    import re

    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft

    t = ensure_trained_draft(RECIPE)
    d = tmp_path / "draft"
    d.mkdir()
    (d / "model.safetensors").symlink_to(Path(t.draft_dir) / "model.safetensors")
    cfg = json.loads((Path(t.draft_dir) / "config.json").read_text())
    if ids is not None:
        cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
    (d / "config.json").write_text(json.dumps(cfg))
    text = (ROOT / "contracts" / "smollm2-135m.yaml").read_text().replace("\nfixture: smollm2-135m\n", "\n")
    text = re.sub(r"(\ntarget:\n  name: [^\n]*\n)", lambda m: m.group(1) + f"  path: {t.target_dir}\n", text, count=1)
    text = text.replace("  name: fixtures/smollm2-135m/draft\n", f"  name: fixtures/smollm2-135m/draft\n  path: {d}\n")
    text = re.sub(r"\n  min_accept_length: [^\n]*", "\n  min_accept_length: null", text)
    c = tmp_path / "my-pair.yaml"
    c.write_text(text.replace("schema/contract.schema.json", str(ROOT / "contracts/schema/contract.schema.json")))
    return c


@pytest.mark.slow
def test_engine_runs_a_users_own_pair_and_catches_their_wrong_ids(tmp_path, monkeypatch):
    """A fresh user's report: the README promised sglang-engine for trained-draft pairs, but only the
    project's fixture ran. A contract naming its own target.path and draft.path now runs the real
    engine; the same pair with the draft config's aux ids one layer deeper fails slot identity."""
    from eagle3_conformance import paths as registry
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.suite import session
    from eagle3_conformance.suite.pairs import resolve_pair

    monkeypatch.setenv("CONFORMANCE_ENGINE_PROMPTS", "2")
    monkeypatch.setenv("CONFORMANCE_ENGINE_TOKENS", "16")
    path = registry.get("sglang-engine")
    for sub, ids, want in (("good", None, "pass"), ("deeper", [2, 15, 27], "fail")):
        (tmp_path / sub).mkdir()
        c = load_contract(_user_pair(tmp_path / sub, ids))
        fs = session.run_path(path, c, resolve_pair(c))
        assert isinstance(fs, list) and fs, fs
        ident = {f.status for f in fs if f.check == "slot_identity"}
        assert want in ident, (sub, ident)
        if want == "pass":
            assert not any(f.status == "fail" for f in fs), [f.message for f in fs if f.status == "fail"][:3]


def test_engine_skips_a_users_pair_whose_draft_has_no_weights(tmp_path):
    from eagle3_conformance import paths as registry
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.suite import session
    from eagle3_conformance.suite.pairs import resolve_pair

    c = load_contract(_user_pair(tmp_path))
    (tmp_path / "draft" / "model.safetensors").unlink()
    r = session.run_path(registry.get("sglang-engine"), c, resolve_pair(c))
    assert "no *.safetensors weights for the draft" in r.reason and str(tmp_path / "draft") in r.reason


@pytest.mark.slow
def test_engine_served_in_another_dtype_gets_check_captures_diagnosis_in_the_same_words(tmp_path, monkeypatch):
    """Issue 41 item 4 on SGLang's real engine: the float16 contract ``init`` writes (SGLang's dtype=auto
    rule), served at float32 (``CONFORMANCE_ENGINE_DTYPE=float32``, what a CPU server runs), fails ``dtype``
    with the ``serving-dtype`` diagnosis and both fixes, in the words ``check-captures`` gives a user's server
    run that way (tests/test_own_server_live.py); it used to be a note on this path. One engine start,
    2 prompts x 16 tokens."""
    from eagle3_conformance import paths as registry
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.core.served_dtype import served_dtype_words
    from eagle3_conformance.diagnose import diagnose
    from eagle3_conformance.suite import session
    from eagle3_conformance.suite.pairs import resolve_pair

    monkeypatch.setenv("CONFORMANCE_ENGINE_PROMPTS", "2")
    monkeypatch.setenv("CONFORMANCE_ENGINE_TOKENS", "16")
    monkeypatch.setenv("CONFORMANCE_ENGINE_DTYPE", "float32")
    p = _user_pair(tmp_path)
    p.write_text(p.read_text() + "precision:\n  serving: float16\n")
    c = load_contract(p)
    assert c.serving_dtype == "float16"
    fs = session.run_path(registry.get("sglang-engine"), c, resolve_pair(c))
    assert isinstance(fs, list) and fs, fs
    assert {f.status for f in fs if f.check == "dtype" and f.slot == "feature"} == {"fail"}
    ident = {f.status for f in fs if f.check == "slot_identity"}
    assert "pass" in ident and "fail" not in ident, ident  # the boundary is right
    (d,) = [x for x in diagnose(c, fs) if x.kind == "serving-dtype"]
    w = served_dtype_words("float16", "float32")
    assert (d.title, d.evidence, d.fix) == (w.title, w.evidence, w.fix)
    assert "--serving-dtype float32" in d.fix[0] and "--dtype float16" in d.fix[1]
