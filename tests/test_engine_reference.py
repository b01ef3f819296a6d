"""The engine as its own reference (issue 33 items 1-2; docs/engine-reference.md): the boundary rules
and the rank rule of the hooks, the record format, the prefix-keyed reference, the identity scan's
honesty about which boundaries it had, the contract field / option, pipeline-parallel refusal, and
the float16 contract that ``init`` writes running on CPU instead of skipping."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from eagle3_conformance.core.notation import Boundary, all_boundaries

ROOT = Path(__file__).resolve().parents[1]


# --- rules of tools/sglang_engine/boundaries.py ------------------------------------------------------


def test_target_modules_are_exact_names_not_wildcards():
    from eagle3_conformance.tools.sglang_engine.boundaries import target_modules

    got = target_modules(["B_0", "B_1", "B_15", "B_30", "F"])
    assert got == {"model.embed_tokens": "B_0", "model.layers.0": "B_1", "model.layers.14": "B_15",
                   "model.layers.29": "B_30", "model.norm": "F"}
    assert target_modules(["B_3"], "language_model.model") == {"language_model.model.layers.2": "B_3"}
    import fnmatch  # SGLang's hook_manager matches with fnmatch: an exact name matches no submodule

    assert not fnmatch.fnmatch("model.layers.14.self_attn", "model.layers.14")
    assert fnmatch.fnmatch("model.layers.14.self_attn", "model.layers.*")  # why wildcards are not used


def test_every_named_family_has_a_rule_and_unknown_ones_are_refused():
    from eagle3_conformance.tools.sglang_engine.boundaries import FAMILIES, family

    for arch in ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Gemma3ForCausalLM",
                 "DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration", "GptOssForCausalLM"):
        assert family([arch]) is FAMILIES[arch]
    assert family(["KimiK25ForConditionalGeneration"]).prefix == "language_model.model"
    with pytest.raises(ValueError, match="MambaForCausalLM.*knows the boundary rules of"):
        family(["MambaForCausalLM"])


def test_layer_output_pair_layout_is_hidden_plus_residual():
    from eagle3_conformance.tools.sglang_engine.boundaries import layer_output

    h, r = torch.randn(5, 8), torch.randn(5, 8)
    assert torch.equal(layer_output((), (h, r)), h + r)  # gemma3_causal.py: called with keywords, args empty
    assert torch.equal(layer_output((), (h, None)), h)
    with pytest.raises(TypeError, match="no known layout"):
        layer_output((), h)


def test_layer_output_stream_layout_uses_sglangs_snapshot_and_leaves_the_stream_untouched():
    """SGLang's own residual stream: B_{k+1} = the contribution + the residual kept apart; the
    pending update stays pending (the next layer's fused add-norm still consumes it)."""
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    from sglang.srt.layers.layer_boundary.residual import batch as residual_batch
    from sglang.srt.layers.layer_boundary.residual.add_norm import PLAIN_ADD

    from eagle3_conformance.tools.sglang_engine.boundaries import layer_output

    fb = SimpleNamespace(residual_stream=None)
    residual_batch.start(fb)
    resid, contrib = torch.randn(4, 6), torch.randn(4, 6)
    fb.residual_stream.residual = resid
    out = fb.residual_stream.record(contrib, PLAIN_ADD)
    got = layer_output((None, None, fb), out)
    assert torch.equal(got, contrib + resid)
    assert fb.residual_stream.pending is not None and fb.residual_stream.residual is resid
    got2 = layer_output((None, None, fb), (out, None))  # deepseek_v2: (hidden_states, topk_indices)
    assert torch.equal(got2, contrib + resid)


@pytest.mark.parametrize("info,records", [
    ({"tp_rank": 0, "tp_size": 2, "attn_tp_rank": 0, "attn_tp_size": 2, "pp_rank": 0, "pp_size": 1}, True),
    ({"tp_rank": 1, "tp_size": 2, "attn_tp_rank": 1, "attn_tp_size": 2, "pp_rank": 0, "pp_size": 1}, False),
    # DP attention (tp 4, dp 2): attention-TP groups of 2; tp rank 2 is rank 0 of the second group
    ({"tp_rank": 2, "tp_size": 4, "attn_tp_rank": 0, "attn_tp_size": 2, "pp_rank": 0, "pp_size": 1}, True),
    ({"tp_rank": 3, "tp_size": 4, "attn_tp_rank": 1, "attn_tp_size": 2, "pp_rank": 0, "pp_size": 1}, False),
    ({"tp_rank": 0, "tp_size": 1, "attn_tp_rank": 0, "attn_tp_size": 1, "pp_rank": 0, "pp_size": 2}, False),
])
def test_rank_rule_records_on_attention_tp_rank_zero(info, records):
    from eagle3_conformance.tools.sglang_engine.boundaries import should_record

    assert should_record(info) is records


def test_recording_rank_without_parallel_state_is_a_single_process():
    from eagle3_conformance.tools.sglang_engine.boundaries import recording_rank

    r = recording_rank()
    assert r["records"] is True and r["tp_size"] == 1


def test_row_sampling_keeps_windows_of_consecutive_rows():
    from eagle3_conformance.tools.sglang_engine.boundaries import sample_rows

    assert sample_rows(10, None) == list(range(10)) and sample_rows(10, 10) == list(range(10))
    rows = sample_rows(1000, 64)
    assert len(rows) == 64 and rows == sorted(set(rows)) and rows[0] == 0 and rows[-1] == 999
    runs = [rows[i + 1] - rows[i] for i in range(len(rows) - 1)]
    assert runs.count(1) >= 48  # 16 windows of 4
    assert sample_rows(5, 0) == []


# --- the hooks' record format ----------------------------------------------------------------------


class _FakeModel(torch.nn.Module):  # what hooks.py tells the target's LlamaModel by: embed_tokens
    def __init__(self):
        super().__init__()
        self.embed_tokens = torch.nn.Identity()
        self.layers_to_capture = [2]


def _fb(mode="EXTEND", n=6):
    return SimpleNamespace(forward_mode=SimpleNamespace(name=mode), req_pool_indices=torch.tensor([0]),
                           seq_lens=torch.tensor([n]), extend_seq_lens=torch.tensor([n]), spec_info=None)


def _one_forward(tmp_path, ref_cfg, n=6, rank=None, monkeypatch=None):
    from eagle3_conformance.tools.sglang_engine import hooks

    hooks._STATE.clear()
    if rank is not None:
        monkeypatch.setattr("eagle3_conformance.tools.sglang_engine.boundaries.recording_rank", lambda: rank)
    main = hooks.draft_input_recorder({"out_dir": str(tmp_path), "reference": ref_cfg})
    per = {b: hooks.boundary_recorder({"out_dir": str(tmp_path), "boundary": b}) for b in ("B_0", "B_1", "F")}
    h0, r0 = torch.randn(n, 4), torch.randn(n, 4)
    per["B_0"](None, (torch.arange(n),), h0)
    per["B_1"](None, (), (h0, r0))
    per["F"](None, (), (r0, h0 + r0))
    main(_FakeModel(), (torch.arange(n), torch.arange(n), _fb(n=n)), None)
    files = sorted(tmp_path.glob("*.pt"))
    return [torch.load(f, weights_only=True) for f in files], h0, r0


def test_record_carries_the_boundaries_of_the_same_forward(tmp_path):
    recs, h0, r0 = _one_forward(tmp_path, {"boundaries": ["B_0", "B_1", "B_2", "F"], "max_rows": None,
                                           "max_bytes": None})
    (rec,) = recs
    assert rec["role"] == "target" and rec["ref_format"] == 1
    assert rec["ref_boundaries"] == ["B_0", "B_1", "F"] and rec["ref_missing"] == ["B_2"]
    assert rec["ref_rows"].tolist() == list(range(6)) and rec["ref_states"].shape == (3, 6, 4)
    assert torch.equal(rec["ref_states"][0], h0) and torch.equal(rec["ref_states"][1], h0 + r0)
    assert torch.equal(rec["ref_states"][2], r0)
    assert rec["ref_rank"]["records"] is True and rec["ref_errors"] == [] and rec["ref_dropped"] is None


def test_byte_budget_drops_the_states_and_says_so(tmp_path):
    recs, _, _ = _one_forward(tmp_path, {"boundaries": ["B_0", "B_1", "F"], "max_rows": 2, "max_bytes": 10})
    (rec,) = recs
    assert rec["ref_states"] is None and "byte budget 10 spent" in rec["ref_dropped"]
    recs, _, _ = _one_forward(tmp_path / "b", {"boundaries": ["B_0"], "max_rows": 2, "max_bytes": 1 << 20})
    assert recs[0]["ref_rows"].tolist() == [0, 1] and recs[0]["ref_states"].shape == (1, 2, 4)


def test_only_the_recording_rank_writes(tmp_path, monkeypatch):
    rank1 = {"tp_rank": 1, "tp_size": 2, "attn_tp_rank": 1, "attn_tp_size": 2, "pp_rank": 0, "pp_size": 1,
             "records": False}
    recs, _, _ = _one_forward(tmp_path, {"boundaries": ["B_0"], "max_rows": None, "max_bytes": None},
                              rank=rank1, monkeypatch=monkeypatch)
    assert recs == []


def test_a_failing_boundary_hook_is_recorded_never_raised(tmp_path):
    from eagle3_conformance.tools.sglang_engine import hooks

    hooks._STATE.clear()
    hook = hooks.boundary_recorder({"out_dir": str(tmp_path), "boundary": "B_3"})
    assert hook(None, (), torch.randn(2, 2)) is None
    assert "B_3: TypeError" in hooks._STATE[str(tmp_path)]["errors"][0]
    hooks._STATE.clear()


def test_specs_register_one_hook_per_boundary_on_exact_modules(tmp_path):
    from eagle3_conformance.tools.sglang_engine.hooks import BOUNDARY_FACTORY, FACTORY, LOGITS_FACTORY, specs

    s = specs(tmp_path, {"boundaries": ["B_0", "B_2", "F"]})
    assert s[0]["hook_factory"] == FACTORY and s[0]["target_modules"] == ["model", "model.fc"]
    assert [(x["target_modules"], x["config"]["boundary"]) for x in s[1:-1]] == [
        (["model.embed_tokens"], "B_0"), (["model.layers.1"], "B_2"), (["model.norm"], "F")]
    assert all(x["hook_factory"] == BOUNDARY_FACTORY for x in s[1:-1])
    # last: the logits summaries of the draft's runtime (issue 45 item 2)
    assert s[-1]["hook_factory"] == LOGITS_FACTORY and s[-1]["target_modules"] == ["logits_processor"]
    assert len(specs(tmp_path)) == 2  # no reference: the draft-input hook and the logits hook


# --- the reference built from records ---------------------------------------------------------------


def _records(prompt, out, states_for):
    """One EXTEND record for the prompt and one TARGET_VERIFY of 3 rows (last committed + 2 drafts)."""
    n = len(prompt)
    ext = {"role": "target", "mode": "EXTEND", "input_ids": torch.tensor(prompt), "positions": torch.arange(n),
           "req_pool_indices": torch.tensor([7]), "extend_seq_lens": torch.tensor([n]), "ref_format": 1,
           "ref_boundaries": ["B_0", "B_1", "F"], "ref_rows": torch.arange(n),
           "ref_states": torch.stack([states_for(prompt[:p + 1]) for p in range(n)], 1), "ref_rank": {"tp_rank": 0}}
    vids = [out[0], 99, 98]  # the bonus token, then two drafts the verifier rejects
    seqs = [prompt + vids[:j + 1] for j in range(3)]
    ver = {"role": "target", "mode": "TARGET_VERIFY", "input_ids": torch.tensor(vids),
           "positions": torch.arange(n, n + 3), "req_pool_indices": torch.tensor([7]), "ref_format": 1,
           "ref_boundaries": ["B_0", "B_1", "F"], "ref_rows": torch.arange(3),
           "ref_states": torch.stack([states_for(s) for s in seqs], 1)}
    return [ext, ver]


def _states(tokens):
    g = torch.Generator().manual_seed(hash(tuple(tokens)) % (1 << 31))
    return torch.randn(3, 4, generator=g)


def test_engine_reference_keys_rows_by_token_prefix():
    from eagle3_conformance.reference import MissingBoundary
    from eagle3_conformance.reference.engine import build_engine_reference

    prompt, out = [5, 6, 7, 8], [9, 10]
    eref = build_engine_reference(_records(prompt, out, _states), [prompt], [out], num_layers=4)
    assert [str(b) for b in eref.present] == ["B_0", "B_1", "F"] and eref.stats["rows"] == 7
    seq = prompt + [9, 99]  # a rejected draft: recorded in the verify forward, by its own prefix
    r = eref.capture(seq)
    assert r.partial and r.names == [Boundary(0), Boundary(1), Boundary.parse("F")]
    for t in range(len(seq)):
        assert torch.equal(r.boundary("B_1")[t], _states(seq[:t + 1])[1])
    other = eref.capture(prompt + [9, 11])  # another continuation: its last row was never computed
    assert eref.known(prompt + [9, 11]).tolist() == [True] * 5 + [False]
    assert torch.isnan(other.boundary("F")[5]).all() and not torch.isnan(other.boundary("F")[4]).any()
    with pytest.raises(MissingBoundary, match="did not record B_2"):
        r.boundary("B_2")


def test_engine_reference_with_nothing_recorded_is_an_error():
    from eagle3_conformance.reference import ReferenceError
    from eagle3_conformance.reference.engine import EngineReference

    with pytest.raises(ReferenceError, match="recorded no boundary"):
        EngineReference(4).capture([1, 2, 3])


def test_needed_boundaries_are_slots_neighbours_embedding_last_and_final():
    from eagle3_conformance.reference.engine import needed_boundaries

    got = needed_boundaries([Boundary(2), Boundary(15), Boundary(27)], 30)
    assert got == ["B_0", "B_1", "B_2", "B_3", "B_14", "B_15", "B_16", "B_26", "B_27", "B_28", "B_30", "F"]


# --- identity scans only what was recorded, and never passes a slot that is something else ----------


def _partial(full, names):
    idx = [all_boundaries(full.num_layers).index(b) for b in names]
    return replace(full, stack=full.stack[idx], present=list(names), source="engine (test)")


def test_partial_reference_judges_like_the_full_one_on_recorded_boundaries(tiny_contract, good_caps, tiny_ref):
    from eagle3_conformance import checks
    from eagle3_conformance.reference.engine import needed_boundaries

    c = tiny_contract
    names = [Boundary.parse(b) for b in needed_boundaries(c.aux, c.L, c.verifier_last.parsed)]
    cap = max(good_caps, key=lambda x: len(x.rows))
    full = tiny_ref.capture(cap.token_ids)
    for slots in (c.aux, [Boundary(0)] + c.aux[1:], [Boundary(b.index + 1) for b in c.aux]):
        feat = torch.cat([full.boundary(b)[cap.rows] for b in slots], -1).to(torch.bfloat16)
        x = replace(cap, feature=feat)
        a = [(f.check, f.slot, f.status, str(f.observed)) for f in checks.run_checks(c, x, full)]
        b = [(f.check, f.slot, f.status, str(f.observed)) for f in checks.run_checks(c, x, _partial(full, names))]
        assert a == b, [(p, q) for p, q in zip(a, b) if p != q]


def test_a_slot_holding_an_unrecorded_boundary_never_passes(tiny_contract, good_caps, tiny_ref):
    """Every declared slot, filled with every boundary the engine reference did not record: slot
    identity fails or is undecidable, never passes; the finding names the boundaries it scanned."""
    from eagle3_conformance.checks.identity import check_slot_identity
    from eagle3_conformance.reference.engine import needed_boundaries

    c = tiny_contract
    names = [Boundary.parse(b) for b in needed_boundaries(c.aux, c.L)]
    cap = max(good_caps, key=lambda x: len(x.rows))
    full = tiny_ref.capture(cap.token_ids)
    part = _partial(full, names)
    unrecorded = [b for b in all_boundaries(c.L) if b not in names]
    assert unrecorded
    seen = 0
    for i in range(c.num_slots):
        for u in unrecorded:
            slots = list(c.aux)
            slots[i] = u
            feat = torch.cat([full.boundary(b)[cap.rows] for b in slots], -1).to(torch.bfloat16)
            fs = [f for f in check_slot_identity(c, replace(cap, feature=feat), part) if f.slot == f"slot {i}"]
            assert fs and fs[0].status != "pass", (i, str(u), fs[0].message)
            assert "scanned the engine (test) reference's recorded boundaries" in fs[0].message
            seen += 1
    assert seen == c.num_slots * len(unrecorded)


def test_a_partial_reference_without_the_neighbours_decides_nothing(tiny_contract, good_caps, tiny_ref):
    from eagle3_conformance.checks.identity import check_slot_identity

    c = tiny_contract
    cap = max(good_caps, key=lambda x: len(x.rows))
    full = tiny_ref.capture(cap.token_ids)
    part = _partial(full, [Boundary(0)] + list(c.aux) + [Boundary.parse("F")])  # no neighbours
    fs = check_slot_identity(c, cap, part)
    assert {f.status for f in fs} <= {"skip", "fail"} and fs


# --- the reference fact, the contract field, the option, PP, the dtype ------------------------------


def test_reference_fact_says_which_judged(tiny_contract):
    from eagle3_conformance.checks.facts import check_reference

    c = tiny_contract
    (t,) = check_reference(c, {"kind": "transformers"})
    assert t.status == "pass" and "transformers forward" in t.message
    full = {"kind": "engine", "source": "engine (x)", "needed": ["B_0", "F"], "recorded": ["B_0", "F"], "rows": 9,
            "bytes": 72}
    assert check_reference(c, full)[0].status == "pass"
    assert check_reference(c, {**full, "recorded": ["B_0"]})[0].status == "skip"
    (f,) = check_reference(c, {**full, "recorded": [], "rows": 0, "errors": ["B_1: TypeError: boom"]})
    assert f.status == "fail" and "boom" in f.message


def test_contract_reference_field_defaults_to_transformers_and_takes_engine(tiny_contract):
    from conftest import contract_with

    assert tiny_contract.reference == "transformers"
    assert contract_with(tiny_contract, reference="engine").reference == "engine"
    from eagle3_conformance.contract import ContractError, parse_contract

    text = (ROOT / "contracts" / "tiny-llama.yaml").read_text() + "reference: both\n"
    with pytest.raises(ContractError, match="reference"):
        parse_contract(text, "c.yaml")


def test_contract_hash_ignores_which_reference_judges(tiny_contract):
    from conftest import contract_with

    from eagle3_conformance.environment.validated import contract_hash

    assert contract_hash(tiny_contract) == contract_hash(contract_with(tiny_contract, reference="engine"))


def test_pipeline_parallel_is_refused_by_validate_and_the_path(tmp_path, tiny_contract):
    from eagle3_conformance.contract import ContractError, parse_contract, pipeline_refusal

    text = (ROOT / "contracts" / "tiny-llama.yaml").read_text()
    text = text.replace("engines:\n", "engines:\n  sglang_pp_size: 2\n", 1)
    with pytest.raises(ContractError) as e:
        parse_contract(text, "c.yaml")
    msg = " ".join(p.message for p in e.value.problems)
    assert "sglang#39644" in msg and "validation_hook.py:131-138" in msg
    p = tmp_path / "pp.yaml"
    p.write_text(text.replace("schema/contract.schema.json", str(ROOT / "contracts/schema/contract.schema.json")))
    import subprocess

    r = subprocess.run([sys.executable, "-m", "eagle3_conformance.cli", "validate", str(p)], capture_output=True,
                       text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 2 and "engines.sglang_pp_size" in r.stdout + r.stderr and "39644" in r.stdout + r.stderr
    assert pipeline_refusal(1) is None and pipeline_refusal(4, "eagle3")

    from eagle3_conformance.paths import sglang_engine

    c = tiny_contract.model_copy(update={"engines": tiny_contract.engines.model_copy(update={"sglang_pp_size": 2})})
    pair = SimpleNamespace(draft_dir=tmp_path, target_dir=tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"")
    c = c.model_copy(update={"fixture": None})
    r = sglang_engine.prepare(c, pair)
    assert "pipeline parallelism (pp_size 2)" in r.reason


def test_a_float16_contract_runs_at_float32_on_cpu_and_says_so(tiny_contract):
    from conftest import contract_with

    from eagle3_conformance.checks.facts import check_engine_lossless
    from eagle3_conformance.paths.sglang_engine import run_dtype

    c16 = contract_with(tiny_contract, **{"precision.serving": "float16"})
    dtype, note = run_dtype(c16, "cpu")
    assert dtype == "float32" and "served at float32 on CPU" in note and "float16" in note
    assert run_dtype(c16, "cuda") == ("float16", "")
    assert run_dtype(tiny_contract, "cpu") == ("float32", "")
    (f,) = check_engine_lossless(c16, {"engine": [[1, 2]], "reference": [[1, 2]], "note": note})
    assert f.status == "pass" and "served at float32 on CPU" in f.message


def test_dtype_check_judges_a_float32_run_of_a_float16_contract_by_the_dtype_it_ran(tiny_contract):
    """The feature's dtype is judged against the dtype the project ran the engine in (provenance
    ``run_dtype``, set by the path when a float16 contract runs at float32 on CPU): the contract's dtype
    was then not served, a skip in the words check-captures uses for a server run in another dtype (issue
    41); it still fails when the feature arrives in any other dtype (a half-precision transport of a
    float32 run), and without the path's word the contract's dtype judges."""
    from conftest import contract_with

    from eagle3_conformance.checks.shape import check_dtype
    from eagle3_conformance.core.capture import Capture

    c16 = contract_with(tiny_contract, **{"precision.serving": "float16"})
    d = c16.target.hidden_size * c16.num_slots

    def cap(dtype, prov):
        return Capture(path="sglang-engine", where="engine extend, request 0", token_ids=torch.arange(4),
                       feature=torch.zeros(4, d, dtype=dtype), rows=torch.arange(4), provenance=prov)

    (ok,) = [f for f in check_dtype(c16, cap(torch.float32, {"run_dtype": "float32"})) if f.slot == "feature"]
    assert ok.status == "skip" and "float16 NOT served here, the path ran the engine in float32" in ok.message
    assert "the target was served in float32; the contract declares precision.serving: float16" in ok.message
    (bad,) = [f for f in check_dtype(c16, cap(torch.float16, {"run_dtype": "float32"})) if f.slot == "feature"]
    assert bad.status == "fail" and bad.observed == "float16" and bad.expected == "float32"
    (plain,) = [f for f in check_dtype(c16, cap(torch.float32, {})) if f.slot == "feature"]
    assert plain.status == "fail" and "contract says float16" in plain.message  # without the path's word: the contract's


def test_pytest_option_overrides_the_contracts_reference(tiny_contract):
    from eagle3_conformance.suite.plugin import PathItem as ContractItem

    item = SimpleNamespace(contract=tiny_contract, config=SimpleNamespace(getoption=lambda name, default=None: "engine"))
    assert ContractItem._judged_contract(item).reference == "engine"
    item.config = SimpleNamespace(getoption=lambda name, default=None: None)
    assert ContractItem._judged_contract(item) is tiny_contract


# --- through the real engine (slow) -------------------------------------------------------------------


@pytest.mark.slow
def test_init_written_float16_contract_runs_the_engine_judged_by_its_own_records(tmp_path):
    """A new user's flow: ``init --engine sglang`` on the float32 SmolLM2 pair writes
    ``precision.serving: float16`` (SGLang's dtype=auto); ``pytest -m conformance --contract`` then runs
    ``sglang-engine`` on CPU at float32 (saying so, losslessness judged), never skips; with
    ``--conformance-reference engine`` the captures are judged against the engine's own records."""
    import os
    import subprocess

    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft

    t = ensure_trained_draft(RECIPE)
    c = tmp_path / "my-pair.yaml"
    r = subprocess.run([sys.executable, "-m", "eagle3_conformance.cli", "init", "--target", str(t.target_dir),
                        "--draft", str(t.draft_dir), "--engine", "sglang", "-o", str(c)], capture_output=True,
                       text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "serving: float16" in c.read_text()
    out = tmp_path / "report.json"
    env = {**os.environ, "CONFORMANCE_ENGINE_PROMPTS": "2", "CONFORMANCE_ENGINE_TOKENS": "8", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-m",
                        "conformance", "-q", "-rs", "--contract", str(c), "--conformance-paths", "sglang-engine",
                        "--conformance-reference", "engine", "--conformance-json", str(out)],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=1200)
    assert "1 passed" in r.stdout and "skipped" not in r.stdout.split("\n")[-2], r.stdout[-3000:] + r.stderr[-2000:]
    fs = json.loads(out.read_text())["findings"]
    (ref,) = [f for f in fs if f["check"] == "reference"]
    assert ref["status"] == "pass" and "engine's own forward" in ref["message"], ref
    (loss,) = [f for f in fs if f["check"] == "lossless"]
    assert loss["status"] == "pass" and "served at float32 on CPU" in loss["message"], loss
    ident = [f for f in fs if f["check"] == "slot_identity"]
    assert any(f["status"] == "pass" for f in ident) and not any(f["status"] == "fail" for f in ident)
    assert all("scanned the engine" in f["message"] for f in ident)


@pytest.mark.slow
def test_tensor_parallel_2_on_cpu_records_on_rank_0_with_the_same_verdicts(tmp_path):
    """SGLang's CPU engine at tp_size 2 (gloo; each rank bound to its own core by
    launch.cpu_bind): the records come from TP rank 0 only, and the captures judged against the
    engine's records give the same verdicts as against the transformers forward (the boundaries
    differ from it by ~1e-6 relative: the all-reduce sums in another order)."""
    import os

    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.faults.engine_column import _engine_findings, _findings, agreement, numeric_agreement
    from eagle3_conformance.paths.sglang_engine import reference_builder, reference_config
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft, eval_prompts
    from eagle3_conformance.tools.sglang_engine import observe_engine

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("tp_size 2 on CPU needs 2 cores")
    t = ensure_trained_draft(RECIPE)
    c = load_contract(ROOT / "contracts" / "smollm2-135m.yaml").model_copy(update={"reference": "engine"})
    ref = reference_config(c, t.target_dir)
    obs = observe_engine(t.target_dir, t.draft_dir, eval_prompts(t.target_dir, 2, 48), max_new_tokens=8,
                         workdir=tmp_path, reference=ref, reference_builder=reference_builder(ref, t.target_dir),
                         extra={"tp_size": 2})
    rank = obs.engine_reference.stats["rank"]
    assert rank["tp_size"] == 2 and rank["tp_rank"] == 0 and rank["records"]
    pids = {p.stem.split("-")[0] for p in (tmp_path / "records").glob("*.pt")}
    assert len(pids) == 1  # one scheduler process (rank 0) wrote every record
    tf, ef = _findings(c, obs), _engine_findings(c, obs)
    a = agreement(tf, ef)
    assert a["differ"] == [] and a["equal"] == a["findings"] > 0, a["differ"][:3]
    assert not any(f.status == "fail" for f in tf + ef)
    assert obs.lossless["engine"] == obs.lossless["reference"]
    num = numeric_agreement(c, obs)
    assert all(v["max_rel_err"] < 1e-4 for v in num.values()), num
