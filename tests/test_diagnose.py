"""Diagnosis (eagle3_conformance.diagnose): every diagnosis is named from the findings of a real run with
its fault injected, and gives its fault-kinds.md kind and the concrete fix (the ids to write).

Faults are injected with the kill matrix's own operators (eagle3_conformance.faults): training data is
written in the speculators 0.9.0 format and read back by speculators' loader; SGLang faults go
through the real CPU harness. Also here: the two checks the diagnoses need that did not exist
(``magnitude``, ``pre_fc_norm``) and ``validate``'s id rule (no engine needed).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest
import torch
from conftest import contract_with

from eagle3_conformance import faults
from eagle3_conformance.diagnose import KINDS, Diagnosis, diagnose
from eagle3_conformance.faults import OPERATORS_BY_NAME as OPS
from eagle3_conformance.faults import Knobs
from eagle3_conformance.faults.inject_sglang import run_sglang
from eagle3_conformance.faults.inject_training import run_training, write_dataset

REPO = Path(__file__).resolve().parent.parent
TINY = (REPO / "contracts" / "tiny-llama.yaml").read_text()
HAS_SGLANG = importlib.util.find_spec("sglang") is not None


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The kill matrix's "base" scenario: L = 8, d = 64, aux B_3, B_5, B_6, calibrated bands;
    SGLang llama ids [2, 4, 5]."""
    scn = faults.build_scenario(faults.MATRIX_SCENARIOS["base"], tmp_path_factory.mktemp("diag-base"),
                                for_sglang=HAS_SGLANG)
    ex = faults.default_example(scn)
    return scn, ex, scn.contract(extra_tokens=ex.tokens())


def _train(base, knobs=Knobs(), contract=None):
    scn, ex, c = base
    return run_training(scn, contract or c, ex, knobs)


def _op(base, name, path="training"):
    scn, ex, c = base
    return OPS[name].paths[path].fn(scn, c, ex)


def _one(ds: list[Diagnosis], kind: str) -> Diagnosis:
    got = [d for d in ds if d.kind == kind]
    assert got, [(d.kind, d.title) for d in ds]
    return got[0]


def _fix(d: Diagnosis) -> str:
    return "\n".join(d.fix)


def test_good_data_has_no_diagnosis(base):
    fs = _train(base)
    assert not [f for f in fs if f.status == "fail"]
    assert diagnose(base[2], fs) == []
    assert {"magnitude"} <= {f.check for f in fs if f.status == "pass"}


def test_every_diagnosis_kind_cites_a_faults_kind():
    faults_md = (REPO / "docs" / "fault-kinds.md").read_text()
    for kind, (fault, _) in KINDS.items():
        assert fault == "" or f"### {fault} " in faults_md, kind
    assert KINDS["reference-mismatch"][0] == ""  # an input problem, said so


# --- slot identity patterns, training data ----------------------------------------------------


def test_one_boundary_too_deep_is_a_convention_shift_with_the_ids_to_write(base):
    ds = diagnose(base[2], _train(base, _op(base, "ids-shifted")))  # data holds B_4, B_6, B_7
    d = ds[0]
    assert (d.kind, d.fault) == ("convention-shift", "K2") and "deeper" in d.title
    assert d.slots == ("slot 0", "slot 1", "slot 2") and d.paths == ("training",)
    assert "slot 0 is B_4, slot 1 is B_6, slot 2 is B_7; contract says B_3, B_5, B_6" in d.evidence
    # the ids, from `eagle3-conformance translate`'s library call
    assert d.ids["sglang"]["ids"] == [2, 4, 5]
    assert d.ids["speculators"]["extra"]["data_generation_ids"] == [3, 5, 6, 8]
    assert "eagle_config.eagle_aux_hidden_state_layer_ids: [2, 4, 5]" in _fix(d)
    assert "--target-layer-ids 3 5 6  (aux ascending; the launcher appends 8" in _fix(d)
    # or the contract change, if the data is the intended one
    assert d.ids["contract"] == {"capture.boundaries": ["B_4", "B_6", "B_7"], "draft.layer_ids.values": [3, 5, 6]}
    assert {"slot_identity", "slot_order", "row_fingerprint"} <= set(d.checks)


def test_one_boundary_too_shallow(base):
    scn, ex, c = base
    c2 = contract_with(c, **{"capture.boundaries": ["B_4", "B_6", "B_7"], "draft.layer_ids.values": [3, 5, 6]})
    fs = _train(base, Knobs(slots=["B_3", "B_5", "B_6", "B_8"]), c2)
    d = _one(diagnose(c2, fs), "convention-shift")
    assert "shallower" in d.title and d.ids["sglang"]["ids"] == [3, 5, 6]


def test_embedding_in_place_of_the_last_layer(base):
    ds = diagnose(base[2], _train(base, _op(base, "embedding-prepended")))  # on disk [B_0, B_3, B_5, B_6]
    d = ds[0]
    assert (d.kind, d.fault) == ("embedding-for-last", "K2")
    assert "slot 0 is B_0 (embedding output); contract says B_3" in d.evidence
    assert any("verifier slot holds B_6, the last aux boundary; contract says B_8" in e for e in d.evidence)
    assert "--target-layer-ids 3 5 6  (aux ascending; the launcher appends 8" in _fix(d)
    assert {"slot_identity", "no_embedding", "verifier_identity"} <= set(d.checks)
    assert len(ds) == 1  # one fault, one diagnosis


def test_engine_default_layers(base):
    d = diagnose(base[2], _train(base, _op(base, "engine-default-layers")))[0]  # data holds B_2, B_4, B_5
    assert (d.kind, d.fault) == ("engine-default", "K1")
    assert d.ids["speculators"]["extra"]["data_generation_ids"] == [3, 5, 6, 8]


def test_slots_permuted(base):
    d = diagnose(base[2], _train(base, _op(base, "slots-swapped")))[0]
    assert (d.kind, d.fault) == ("slots-permuted", "K2")
    assert d.slots == ("slot 0", "slot 1") and "[B_5, B_3, B_6]" in d.evidence[0]


def test_one_slot_off(base):
    d = diagnose(base[2], _train(base, Knobs(slots=["B_3", "B_5", "B_7", "B_8"])))[0]
    assert (d.kind, d.fault, d.slots) == ("slot-off", "K2", ("slot 2",))
    assert "slot 2 is B_7 (entering layer 7); contract says B_6" in d.evidence
    assert d.ids["sglang"]["ids"] == [2, 4, 5]
    assert d.ids["contract"]["capture.boundaries"] == ["B_3", "B_5", "B_7"]


def test_verifier_F_where_B_L_is_declared(base):
    scn, ex, c = base
    d = diagnose(c, _train(base, Knobs(slots=[str(b) for b in c.aux] + ["F"])))[0]
    assert (d.kind, d.fault, d.slots) == ("verifier-norm-state", "K4", ("verifier",))
    assert "F" in d.title and "B_8" in d.title
    assert "verifier_last: {tensor: F, norm: post}" in _fix(d)


def test_verifier_B_L_where_F_is_declared(base):
    scn, ex, c = base
    cf = contract_with(c, **{"verifier_last.tensor": "F", "verifier_last.norm": "post",
                             "norm_bands.status": "uncalibrated", "norm_bands.bands": []})
    d = _one(diagnose(cf, _train(base, Knobs(slots=["B_3", "B_5", "B_6", "B_8"]), cf)), "verifier-norm-state")
    assert "B_8 (before the final norm) where the contract declares F" in d.title


def test_a_slot_that_is_the_update_without_its_residual(base):
    """slot 2 = B_6 - B_5: recognised from the reference (slot + B_5 = B_6), issue 23 item 6."""
    d = diagnose(base[2], _train(base, _op(base, "hidden-without-residual")))[0]
    assert (d.kind, d.fault, d.slots) == ("hidden-without-residual", "K4", ("slot 2",))
    assert "slot 2 + B_5 is B_6" in d.evidence[0] and "residual" in _fix(d)


def _all_without_residual(scn, r, hs):
    from eagle3_conformance.core.notation import Boundary

    hs = hs.clone()
    for j, b in enumerate((3, 5, 6)):  # every aux slot B_b written as B_b - B_{b-1} (Gemma 3's capture bug)
        hs[:, j] = r.boundary(Boundary(b)) - r.boundary(Boundary(b - 1))
    return hs


def test_every_slot_without_its_residual_is_not_blamed_on_the_reference(base):
    """All slots match no boundary: before, "the reference is another checkpoint"; the sum with the
    preceding boundary says what they are, and a path of the same run that matched clears the reference."""
    fs = _train(base, Knobs(hs_transform=_all_without_residual))
    ds = diagnose(base[2], fs)
    assert [d.kind for d in ds][:1] == ["hidden-without-residual"] and "reference-mismatch" not in [d.kind for d in ds]
    assert ds[0].slots == ("slot 0", "slot 1", "slot 2")
    good = [dataclasses.replace(f, path="training-vllm") for f in _train(base)]
    ds2 = diagnose(base[2], fs + good)
    assert "reference-mismatch" not in [d.kind for d in ds2]
    assert any("training-vllm" in e and "right checkpoint" in e for e in ds2[0].evidence)


def test_the_reference_is_not_blamed_when_another_path_matched_it(base):
    """Slots that match nothing on one path (a foreign tensor) while another path of the run matches the
    same reference: not-a-boundary, never reference-mismatch."""
    def foreign(scn, r, hs):
        g = torch.Generator().manual_seed(0)
        return torch.randn(hs.shape, generator=g) * hs.std()

    fs = _train(base, Knobs(hs_transform=foreign))
    assert diagnose(base[2], fs)[0].kind == "reference-mismatch"  # alone: the reference is suspect
    good = [dataclasses.replace(f, path="training-vllm") for f in _train(base)]
    kinds = [d.kind for d in diagnose(base[2], fs + good)]
    assert "reference-mismatch" not in kinds and "not-a-boundary" in kinds, kinds


def test_another_checkpoint_as_reference(base):
    """Data of one target, fingerprinted against another checkpoint of the same architecture."""
    from eagle3_conformance.checks import run_checks
    from eagle3_conformance.tools.speculators_loader import TrainingLoader

    scn, ex, c = base
    other = faults.build_scenario(faults.ScenarioSpec("other", 8, 64, 64, (3, 5, 6), seed=99),
                                  scn.workdir.parent / "other")
    data = write_dataset(scn.fresh_dir("data"), scn, c, Knobs())
    fs = []
    for cap in TrainingLoader(data, 64, 3, torch.bfloat16).batch(list(range(len(scn.samples)))):
        fs += run_checks(c, cap, other.ref.capture(cap.token_ids))
    d = diagnose(c, fs)[0]
    assert (d.kind, d.fault) == ("reference-mismatch", "") and "another checkpoint" in d.title
    assert "--reference" in _fix(d)


def test_last_slot_unreachable(tmp_path):
    scn = faults.build_scenario(faults.MATRIX_SCENARIOS["final"], tmp_path)  # aux B_3, B_5, B_8
    ex = faults.default_example(scn)
    c = scn.contract(extra_tokens=ex.tokens())
    fs = run_training(scn, c, ex, OPS["last-slot-unreachable"].paths["training"].fn(scn, c, ex))
    d = diagnose(c, fs)[0]
    assert (d.kind, d.fault) == ("slot-count", "K3") and "B_8" in d.title


def test_rows_of_other_requests(base):
    d = _one(diagnose(base[2], _train(base, _op(base, "rows-permuted-across-requests"))), "rows-misassigned")
    assert d.fault == "K13"


def test_F_instead_of_the_concat_in_training_data(base):
    d = diagnose(base[2], _train(base, _op(base, "final-norm-output-as-aux")))[0]  # on disk [F, B_L]
    assert (d.kind, d.fault) == ("one-slot-input", "K5") and "F" in d.title


# --- magnitude: caught against the reference itself, bands uncalibrated ------------------------


def _uncalibrated(c):
    return contract_with(c, **{"norm_bands.status": "uncalibrated", "norm_bands.bands": []})


def _slot1(fn):
    def tf(scn, r, hs):
        hs = hs.clone()
        hs[:, 1] = fn(hs[:, 1])
        return hs

    return Knobs(hs_transform=tf)


def test_slot_normalized_without_its_weights_is_caught_with_uncalibrated_bands(base):
    cu = _uncalibrated(base[2])
    fs = _train(base, _slot1(lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)), cu)
    assert not [f for f in fs if f.check in ("slot_identity", "norm_band") and f.status == "fail"]
    bad = [f for f in fs if f.check == "magnitude" and f.status == "fail"]
    assert bad and {f.slot for f in bad} == {"slot 1"}
    assert abs(bad[0].observed["slot_rms"] - 1) < 0.01
    d = diagnose(cu, fs)[0]
    assert (d.kind, d.fault, d.slots) == ("magnitude", "K4", ("slot 1",))
    assert "normalized without its norm weights" in d.title


def test_slot_rescaled_by_a_constant(base):
    cu = _uncalibrated(base[2])
    fs = _train(base, _slot1(lambda x: 4 * x), cu)
    d = diagnose(cu, fs)[0]
    assert (d.kind, d.fault, d.slots) == ("magnitude", "K12", ("slot 1",))
    assert "factor 4" in d.title and "dequantize" in _fix(d)


def test_magnitude_check_pass_fail_and_skip(tiny_contract, good_caps, tiny_ref):
    from dataclasses import replace

    from eagle3_conformance.checks import check_magnitude

    cap = max(good_caps, key=lambda x: len(x.rows))
    ref = tiny_ref.capture(cap.token_ids)
    assert {f.status for f in check_magnitude(tiny_contract, cap, ref)} == {"pass"}
    f = cap.feature.float().clone()
    f[:, 64:128] *= 0.5
    got = {x.slot: x for x in check_magnitude(tiny_contract, replace(cap, feature=f), ref)}
    assert got["slot 1"].status == "fail" and abs(got["slot 1"].observed["rms_ratio"] - 0.5) < 0.01
    assert got["slot 0"].status == "pass"
    f[:, 0:64] = ref.boundary("B_6")[cap.rows]  # points elsewhere: identity's job, not magnitude's
    got = {x.slot: x for x in check_magnitude(tiny_contract, replace(cap, feature=f), ref)}
    assert got["slot 0"].status == "skip"


def test_magnitude_band_by_serving_dtype_still_catches_a_rescaled_slot(tiny_contract, good_caps, tiny_ref):
    """A bf16-served contract allows the measured bf16 forward noise (3x, docs/gates.md) but a
    slot off by a factor of 10 still fails; float32 keeps 1.1x."""
    from dataclasses import replace

    from eagle3_conformance.checks import check_magnitude

    bf16 = tiny_contract.model_copy(update={"target": tiny_contract.target.model_copy(update={"dtype": "bfloat16"})})
    cap = max(good_caps, key=lambda x: len(x.rows))
    ref = tiny_ref.capture(cap.token_ids)
    f = cap.feature.float().clone()
    f[:, 64:128] *= 0.5  # within the bf16 allowance, outside the float32 one
    assert {x.slot: x.status for x in check_magnitude(bf16, replace(cap, feature=f), ref)}["slot 1"] == "pass"
    assert {x.slot: x.status for x in check_magnitude(tiny_contract, replace(cap, feature=f), ref)}["slot 1"] == "fail"
    f[:, 64:128] = cap.feature.float()[:, 64:128] * 0.1  # e.g. FP8 read without a scale of 10
    got = {x.slot: x for x in check_magnitude(bf16, replace(cap, feature=f), ref)}
    assert got["slot 1"].status == "fail", got["slot 1"].message


# --- JSON findings in, merged paths ----------------------------------------------------------------


def test_diagnose_reads_json_findings_as_well(base):
    fs = _train(base, _op(base, "ids-shifted"))
    from_json = diagnose(base[2], json.loads(json.dumps([f.to_json() for f in fs])))
    assert [d.to_json() for d in from_json] == [d.to_json() for d in diagnose(base[2], fs)]


def test_folded_pass_counts_weigh_as_their_count(base):
    """A report written with --json-passes counts (report._pass_counts: passes folded per path,
    check and slot with a ``count``) diagnoses as the full report: a folded entry is ``count`` passes.
    The fault is on a minority of the findings (one faulty run among three good ones), where
    counting a folded entry as one pass would turn it into a majority."""
    from eagle3_conformance import report

    bad = _train(base, _op(base, "ids-shifted"))
    good = _train(base)
    full = [f.to_json() for f in bad + good * 3]
    folded = json.loads(json.dumps([f.to_json() for f in report._pass_counts(bad + good * 3)]))
    assert len(folded) < len(full) and any(f.get("count", 1) > 1 for f in folded)
    want = [d.to_json() for d in diagnose(base[2], full)]
    assert [d.to_json() for d in diagnose(base[2], folded)] == want


# --- SGLang paths: the real harness ------------------------------------------------------------------

sglang_only = pytest.mark.skipif(not HAS_SGLANG, reason="SGLang is not installed")


@pytest.fixture(scope="module")
def pool():
    p = faults.HarnessPool()
    yield p
    p.close()


def _serve(base, pool, path, knobs=Knobs(), contract=None):
    scn, ex, c = base
    return run_sglang(scn, contract or c, ex, path, pool, knobs)


@sglang_only
def test_engine_ids_read_under_the_other_convention(base, pool):
    fs = _serve(base, pool, "sglang-extend", _op(base, "ids-shifted", "sglang-extend"))
    fs += _serve(base, pool, "sglang-decode", _op(base, "ids-shifted", "sglang-decode"))
    ds = diagnose(base[2], fs)
    assert len(ds) == 1  # the same fault on both paths: one diagnosis naming both
    d = ds[0]
    assert (d.kind, d.fault) == ("convention-shift", "K2")
    assert d.paths == ("sglang-extend", "sglang-decode")
    assert d.ids["sglang"]["ids"] == [2, 4, 5] and "speculators" not in d.ids
    assert "engine_mapping" in d.checks


@sglang_only
def test_engine_id_reaching_the_embedding(base, pool):
    d = diagnose(base[2], _serve(base, pool, "sglang-extend", _op(base, "embedding-prepended", "sglang-extend")))[0]
    assert (d.kind, d.fault) == ("embedding-for-last", "K2")
    assert d.ids["sglang"]["ids"] == [2, 4, 5]


@sglang_only
@pytest.mark.parametrize("op,path,fault,words", [
    ("decode-buffer-sized-d", "sglang-decode", "K7", "buffer sized d"),
    ("draft-states-fed-back", "sglang-decode", "K9", "own output states"),
    ("final-norm-output-as-aux", "sglang-extend", "K5", "handed F"),
])
def test_width_1xd_reaching_the_draft_fc_skipped(base, pool, op, path, fault, words):
    fs = _serve(base, pool, path, _op(base, op, path))
    assert any(f.check == "fc_ran" and f.status == "fail" for f in fs)
    d = diagnose(base[2], fs)[0]
    assert (d.kind, d.fault) == ("one-slot-input", fault) and words in d.title
    assert any("fc did not run" in e for e in d.evidence)


@sglang_only
def test_pre_fc_norm_declared_but_not_applied(base, pool):
    scn, ex, c = base
    declared = contract_with(c, **{"draft.pre_fc_norm": "norm_before_fc"})
    with_norm = Knobs(variant={"draft": {"norm_before_fc": True}})  # the draft built with its norm
    fs = _serve(base, pool, "sglang-extend", with_norm, declared)
    assert {f.status for f in fs if f.check == "pre_fc_norm"} == {"pass"}
    h = pool.get(scn, with_norm.variant)
    saved = h.draft.model.input_norm
    h.draft.model.input_norm = None  # the engine path ignores the draft's norm (vllm-project/vllm#38111 kind)
    try:
        fs = _serve(base, pool, "sglang-extend", with_norm, declared)
        fs += _serve(base, pool, "sglang-decode", with_norm, declared)
    finally:
        h.draft.model.input_norm = saved
    bad = [f for f in fs if f.check == "pre_fc_norm" and f.status == "fail"]
    assert bad and {f.observed for f in bad} == {"none"}
    d = diagnose(declared, fs)[0]
    assert (d.kind, d.fault) == ("pre-fc-norm", "K4") and "feeds fc without it" in d.title
    assert set(d.paths) == {"sglang-extend", "sglang-decode"}
    assert "norm_before_fc" in _fix(d)
    # the reverse: the engine applies a norm the contract does not declare
    d = diagnose(c, _serve(base, pool, "sglang-extend", with_norm))[0]
    assert d.kind == "pre-fc-norm" and "does not declare" in d.title


@sglang_only
def test_pre_fc_norm_ignores_changes_made_after_the_engine(base, pool):
    """An in-memory fault on the capture (after the engine) leaves the draft's own fc input
    consistent with what the draft received: no pre_fc_norm failure."""
    fs = _serve(base, pool, "sglang-extend", _op(base, "pre-post-norm-swapped", "sglang-extend"))
    assert {f.status for f in fs if f.check == "pre_fc_norm"} == {"pass"}


# --- validate: layer ids that cannot give the declared boundaries (no engine) ------------------------


def _problems(old: str, new: str):
    from eagle3_conformance.contract import ContractError, parse_contract

    assert old in TINY, old
    with pytest.raises(ContractError) as e:
        parse_contract(TINY.replace(old, new, 1), "c.yaml")
    return e.value.problems


@pytest.mark.parametrize("new,key,words", [
    ("values: [2, 4, 5]", "draft.layer_ids.values", "capture ['B_3', 'B_5', 'B_6'] under sglang llama.py"),
    ("values: [-1, 3, 4]", "draft.layer_ids.values.0", "negative"),
    ("values: [1, 3, 7]", "draft.layer_ids.values.2", "never captures B_8"),
])
def test_validate_refuses_ids_that_cannot_give_the_boundaries(new, key, words):
    probs = _problems("values: [1, 3, 4]", new)
    hit = [p for p in probs if ".".join(map(str, p.loc)) == key]
    assert hit, [(p.loc, p.message) for p in probs]
    assert words in hit[0].message
    lines = TINY.splitlines()
    assert hit[0].line is not None and "values:" in lines[hit[0].line - 1]
    assert hit[0].format("c.yaml").startswith(f"c.yaml:{hit[0].line}:")


def test_validate_ids_fix_names_the_ids_to_write():
    (p,) = [p for p in _problems("values: [1, 3, 4]", "values: [2, 4, 5]") if p.loc == ("draft", "layer_ids", "values")]
    assert "write [1, 3, 4]" in p.message


def test_validate_id_rules_without_an_engine():
    from eagle3_conformance.engine_ids import layer_id_problems

    # either convention may apply when no engine is declared
    assert layer_id_problems(8, ["B_2", "B_4", "B_5"], [2, 4, 5], "top_level") == []
    assert layer_id_problems(8, ["B_2", "B_4", "B_5"], [1, 3, 4], "nested") == []
    assert layer_id_problems(8, ["B_2", "B_4", "B_5"], [3, 5, 6], "nested")  # neither reading
    # output-of id L reads past the target
    assert "beyond" in layer_id_problems(8, ["B_2", "B_4", "B_8"], [1, 3, 8], "nested", sglang=True,
                                         architecture="LlamaForCausalLM")[0][1]
    # deepseek_v2's first-id rule (0.5.13+): raw ids unless the first is 1
    assert layer_id_problems(61, ["B_2", "B_30", "B_58"], [2, 30, 58], "nested", model_file="deepseek_v2") == []
    assert layer_id_problems(61, ["B_2", "B_30", "B_58"], [1, 29, 57], "nested", model_file="deepseek_v2") == []
    assert layer_id_problems(61, ["B_2", "B_30", "B_58"], [2, 29, 57], "nested", model_file="deepseek_v2")
    # SGLang ignores a top-level key: the values are not read (its defaults apply; init says so)
    assert layer_id_problems(8, ["B_2", "B_4", "B_5"], [3, 4, 5], "top_level", model_file="llama") == []


def test_data_of_another_width_is_another_model_not_a_slot_count(tiny, tmp_path):
    """Hidden states twice the target's width: the feature is a whole number of d-wide "slots",
    but the verifier slot's own width says the data is another model's (found by a fresh-user
    trial: the top diagnosis used to be a slot count)."""
    import shutil

    from safetensors.torch import load_file, save_file

    from eagle3_conformance.cli import main

    data = tmp_path / "wide"
    shutil.copytree(tiny.data_dir, data)
    for p in sorted((data / "hidden_states").glob("hs_*.safetensors")):
        t = load_file(str(p))
        t["hidden_states"] = torch.cat([t["hidden_states"], t["hidden_states"]], dim=-1).contiguous()
        save_file(t, str(p))
    out = tmp_path / "r.json"
    assert main(["check-data", str(REPO / "contracts" / "tiny-llama.yaml"), "--data", str(data), "--no-reference",
                 "--quiet", "--json", str(out)]) == 1
    ds = json.loads(out.read_text())["diagnoses"]
    assert ds[0]["kind"] == "other-model-width" and ds[0]["fault"] == "K6", [d["kind"] for d in ds]
    assert "slot-count" not in [d["kind"] for d in ds]
    assert "128 wide" in ds[0]["title"], ds[0]["title"]  # tiny-llama: d = 64, stored 2 x 64


def test_the_embedding_in_the_verifier_slot_is_diagnosed(base):
    """On-disk slots [B_3, B_5, B_6, B_0]: the verifier slot holds the embedding (issue 23 item 6: before, it
    failed verifier_identity with no diagnosis)."""
    d = _one(diagnose(base[2], _train(base, Knobs(slots=["B_3", "B_5", "B_6", "B_0"]))), "verifier-slot-off")
    assert d.fault == "K3" and "B_0, the embedding output" in d.title and d.slots == ("verifier",)
    assert "verifier_identity" in d.checks


def test_path_diagnoses_of_separate_runs_merge_to_the_diagnosis_of_all(base):
    """The pytest plugin diagnoses each failing item once (issue 27): the path diagnoses of runs
    whose paths differ, merged, are what diagnosing all their findings at once gives."""
    import dataclasses

    from eagle3_conformance.diagnose import merge_diagnoses, path_diagnoses

    a = _train(base, _op(base, "ids-shifted"))
    b = [dataclasses.replace(f, path="training-b") for f in _train(base, _op(base, "ids-shifted"))]
    c = [dataclasses.replace(f, path="training-c") for f in _train(base)]
    whole = [d.to_json() for d in diagnose(base[2], a + c + b)]
    assert whole and [d.to_json() for d in merge_diagnoses(
        path_diagnoses(base[2], a) + path_diagnoses(base[2], c) + path_diagnoses(base[2], b))] == whole
