"""Every check passes on good captures and fails on the fault it exists for (injected here).

Good captures come from the real speculators loader over the tiny-llama fixture data; faults are
injected into copies of them, never into the files.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import contract_with

from eagle3_conformance import checks
from eagle3_conformance.core.notation import Boundary

REPO = Path(__file__).resolve().parent.parent


def _status(findings, check, slot=None):
    got = [f for f in findings if f.check == check and (slot is None or f.slot == slot)]
    assert got, f"no {check} finding"
    return {f.status for f in got}


def _feature_from(ref, cap, boundaries):
    """A feature built from reference boundaries at the capture's rows, in bf16 like the data."""
    return torch.cat([ref.boundary(b)[cap.rows] for b in boundaries], -1).to(torch.bfloat16)


@pytest.fixture
def cap(good_caps):
    return max(good_caps, key=lambda c: len(c.rows))


@pytest.fixture
def ref(tiny_ref, cap):
    return tiny_ref.capture(cap.token_ids)


def test_good_capture_passes_every_check(tiny_contract, good_caps, tiny_ref):
    for cap in good_caps:
        fs = checks.run_checks(tiny_contract, cap, tiny_ref.capture(cap.token_ids))
        bad = [f for f in fs if f.status == "fail"]
        assert not bad, bad
        assert {"slot_identity", "slot_order", "verifier_identity", "feature_alignment"} <= {f.check for f in fs}


def test_slot_identity_names_the_embedding(tiny_contract, cap, ref):
    bad = replace(cap, feature=_feature_from(ref, cap, ["B_0", "B_4", "B_5"]))
    fs = checks.check_slot_identity(tiny_contract, bad, ref)
    f0 = next(f for f in fs if f.slot == "slot 0")
    assert f0.status == "fail"
    assert f0.observed == "B_0"
    assert "slot 0 is B_0 (embedding output)" in f0.message and "contract says B_2" in f0.message
    assert {f.status for f in fs if f.slot != "slot 0"} == {"pass"}


def test_slot_identity_catches_off_by_one(tiny_contract, cap, ref):
    bad = replace(cap, feature=_feature_from(ref, cap, ["B_3", "B_5", "B_6"]))
    fs = checks.check_slot_identity(tiny_contract, bad, ref)
    assert [f.observed for f in fs] == ["B_3", "B_5", "B_6"]
    assert {f.status for f in fs} == {"fail"}


def test_slot_identity_undecidable_within_noise_allowance(tiny_contract, cap, ref):
    """A slot whose best match is a neighbour by less than the noise allowance is not decided
    (skip, never fail, never pass); beyond the allowance the same direction fails."""
    b4 = ref.boundary("B_4")[cap.rows]
    b5 = ref.boundary("B_5")[cap.rows]
    u4, u5 = b4 / b4.norm(dim=-1, keepdim=True), b5 / b5.norm(dim=-1, keepdim=True)

    def slot1(w):
        return next(f for f in checks.check_slot_identity(tiny_contract, replace(cap, feature=torch.cat(
            [ref.boundary("B_2")[cap.rows], (1 - w) * u4 + w * u5, ref.boundary("B_5")[cap.rows]], -1)), ref)
            if f.slot == "slot 1")

    near = slot1(0.503)  # just past halfway: B_5 wins by a hair
    assert near.status == "skip" and near.observed.startswith("undecidable"), near
    assert slot1(1.0).status == "fail" and slot1(1.0).observed == "B_5"
    assert slot1(0.0).status == "pass"


def test_slot_identity_excludes_unresolvable_tokens(tiny_contract, cap, ref):
    """Tokens at which the reference's boundaries coincide carry no evidence: with the
    resolvable threshold at -1 every token is excluded and the sample is not decided."""
    c = tiny_contract.model_copy(update={"gates": tiny_contract.gates.model_copy(update={"resolvable_max_cosine": 1e-9})})
    bad = replace(cap, feature=_feature_from(ref, cap, ["B_3", "B_5", "B_6"]))
    fs = checks.check_slot_identity(c, bad, ref)
    assert {f.status for f in fs} <= {"skip"} and "no resolvable" in fs[0].observed


def test_slot_order_catches_swapped_blocks(tiny_contract, cap, ref):
    bad = replace(cap, feature=_feature_from(ref, cap, ["B_2", "B_5", "B_4"]))
    f = checks.check_slot_order(tiny_contract, bad, ref)[0]
    assert f.status == "fail" and "out of order" in f.message


def test_no_embedding(tiny_contract, cap, ref):
    bad = replace(cap, feature=_feature_from(ref, cap, ["B_0", "B_4", "B_5"]))
    fs = checks.check_no_embedding(tiny_contract, bad, ref)
    assert _status(fs, "no_embedding", "slot 0") == {"fail"}
    assert _status(checks.check_no_embedding(tiny_contract, cap, ref), "no_embedding") == {"pass"}


def test_no_embedding_claims_b0_only_when_b0_is_a_match(tiny_contract, cap, ref):
    """All-zero slot data matches no boundary (every cosine 0: argmax lands on B_0 by index): no
    "slot is B_0" claim; the slot is skipped as matching nothing, and slot_identity fails it."""
    zero = torch.zeros_like(cap.feature)
    bad = replace(cap, feature=torch.cat([zero[:, :64], cap.feature[:, 64:]], dim=1))
    fs = checks.check_no_embedding(tiny_contract, bad, ref)
    s0 = [f for f in fs if f.slot == "slot 0"]
    assert [f.status for f in s0] == ["skip"] and "matches no boundary" in s0[0].message
    assert "is B_0" not in s0[0].message
    assert _status(fs, "no_embedding", "slot 1") == {"pass"}
    ident = [f for f in checks.check_slot_identity(tiny_contract, bad, ref) if f.slot == "slot 0"]
    assert [f.status for f in ident] == ["fail"] and "matches no boundary" in ident[0].message
    allzero = checks.check_no_embedding(tiny_contract, replace(cap, feature=zero), ref)
    assert {f.status for f in allzero} == {"skip"} and not any("is B_0" in f.message for f in allzero)


def test_slot_count_and_width_catch_missing_slot(tiny_contract, cap):
    bad = replace(cap, feature=cap.feature[:, :128])  # K-1 slots: B_L unreachable style
    assert _status(checks.check_slot_count(tiny_contract, bad), "slot_count") == {"fail"}
    assert _status(checks.check_width(tiny_contract, bad), "feature_width") == {"fail"}
    assert _status(checks.check_slot_count(tiny_contract, cap), "slot_count") == {"pass"}


def test_draft_input_width_catches_d_wide_input(tiny_contract, cap, ref):
    bad = replace(cap, feature=ref.boundary(Boundary(0, final=True))[cap.rows], draft_input_width=64)
    fs = checks.check_width(tiny_contract, bad)
    assert _status(fs, "draft_input_width") == {"fail"}
    assert _status(checks.check_slot_count(tiny_contract, bad), "slot_count") == {"fail"}


def test_verifier_width(tiny_contract, cap):
    bad = replace(cap, verifier_last=cap.verifier_last[:, :48])
    assert _status(checks.check_width(tiny_contract, bad), "verifier_width") == {"fail"}


def test_fc_ran(tiny_contract, cap):
    assert _status(checks.check_fc_ran(tiny_contract, replace(cap, fc_ran=False, draft_input_width=64)), "fc_ran") == {"fail"}
    assert _status(checks.check_fc_ran(tiny_contract, replace(cap, fc_ran=True)), "fc_ran") == {"pass"}
    assert checks.check_fc_ran(tiny_contract, cap) == []  # no draft on the training path


def test_engine_mapping(tiny_contract, cap):
    good = replace(cap, engine_ids=[1, 3, 4], engine_boundaries=["B_2", "B_4", "B_5"])
    bad = replace(cap, engine_ids=[2, 4, 5], engine_boundaries=["B_2", "B_4", "B_5"][:0] + ["B_3", "B_4", "B_5"])
    assert _status(checks.check_engine_mapping(tiny_contract, good), "engine_mapping") == {"pass"}
    assert _status(checks.check_engine_mapping(tiny_contract, bad), "engine_mapping") == {"fail"}


def test_dtype(tiny_contract, cap):
    bad = replace(cap, feature=cap.feature.float(), provenance={**cap.provenance, "on_disk_dtype": "float32"})
    fs = checks.check_dtype(tiny_contract, bad)
    assert _status(fs, "dtype", "feature") == {"fail"} and _status(fs, "dtype", "on disk") == {"fail"}
    ids32 = replace(cap, draft_input_ids=cap.draft_input_ids.int())
    assert _status(checks.check_dtype(tiny_contract, ids32), "id_dtype", "draft_input_ids") == {"fail"}
    assert _status(checks.check_dtype(tiny_contract, cap), "dtype") == {"pass"}


def test_finite(tiny_contract, cap):
    f = cap.feature.clone()
    f[3, 7] = float("nan")
    fs = checks.check_finite(tiny_contract, replace(cap, feature=f))
    bad = next(x for x in fs if x.slot == "feature")
    assert bad.status == "fail" and "[3]" in bad.observed


def test_row_count(tiny_contract, cap):
    bad = replace(cap, feature=cap.feature[:-1])
    assert _status(checks.check_row_count(tiny_contract, bad), "row_count") == {"fail"}
    assert _status(checks.check_row_count(tiny_contract, cap), "row_count") == {"pass"}


def test_token_ids_match(tiny_contract, cap):
    src = cap.token_ids.clone()
    src[2] += 1
    assert _status(checks.check_token_ids_match(tiny_contract, replace(cap, source_token_ids=src)), "token_ids") == {"fail"}


def test_sample_available(tiny_contract, cap):
    assert _status(checks.run_checks(tiny_contract, replace(cap, unavailable="token ids mismatch"), None),
                   "sample_available") == {"fail"}


def test_verifier_identity_and_norm_state_catch_F(tiny_contract, cap, ref):
    F = ref.boundary("F")[cap.rows + 1].to(torch.bfloat16)
    bad = replace(cap, verifier_last=F)
    f = checks.check_verifier_identity(tiny_contract, bad, ref)[0]
    assert f.status == "fail" and f.observed == "F"
    n = checks.check_verifier_norm_state(tiny_contract, bad, ref)[0]
    assert n.status == "fail" and "post-norm" in n.observed
    # a contract that declares F post-norm accepts it, and rejects B_L
    cF = contract_with(tiny_contract, **{"verifier_last.tensor": "F", "verifier_last.norm": "post"})
    assert checks.check_verifier_norm_state(cF, bad, ref)[0].status == "pass"
    assert checks.check_verifier_identity(cF, bad, ref)[0].status == "pass"
    assert checks.check_verifier_norm_state(cF, cap, ref)[0].status == "fail"


def test_norm_state_sees_hidden_without_residual(tiny_contract, cap, ref):
    # K4: a slot captured without the residual is not B_k: identity must not pass it as B_2
    no_resid = (ref.boundary("B_3") - ref.boundary("B_2"))[cap.rows]
    feat = torch.cat([no_resid, ref.boundary("B_4")[cap.rows], ref.boundary("B_5")[cap.rows]], -1)
    fs = checks.check_slot_identity(tiny_contract, replace(cap, feature=feat), ref)
    assert next(f for f in fs if f.slot == "slot 0").status == "fail"


def _calibrated(contract, ref, cap, kappa=1.5):
    bands = []
    for b in contract.aux + [contract.verifier_last.parsed]:
        rows = cap.rows[1:] + (1 if b == contract.verifier_last.parsed else 0)
        r = ref.boundary(b)[rows].pow(2).mean(-1).sqrt()
        bands.append({"slot": str(b), "lo": float(r.min()) / kappa, "hi": float(r.max()) * kappa})
    return contract_with(contract, **{"norm_bands.status": "calibrated", "norm_bands.bands": bands})


def test_norm_bands(tiny_contract, cap, ref):
    c = _calibrated(tiny_contract, ref, cap)
    assert _status(checks.check_norm_bands(c, cap), "norm_band") == {"pass"}
    scaled = cap.feature.clone()
    scaled[:, 64:128] *= 20  # slot 1 out of scale (an FP8 dump read without its scales, K12)
    fs = checks.check_norm_bands(c, replace(cap, feature=scaled))
    assert _status(fs, "norm_band", "slot 1") == {"fail"}
    assert _status(fs, "norm_band", "slot 0") == {"pass"}


def test_uncalibrated_bands_are_reported_not_passed(tiny_contract, cap):
    fs = checks.check_norm_bands(tiny_contract, cap)
    assert [f.status for f in fs] == ["skip"] and fs[0].observed == "uncalibrated"


def test_feature_alignment_catches_shifted_rows(tiny_contract, cap, ref):
    shifted = torch.cat([ref.boundary(b)[(cap.rows + 1).clamp(max=len(cap.token_ids) - 1)]
                         for b in tiny_contract.aux], -1).to(torch.bfloat16)
    f = checks.check_feature_alignment(tiny_contract, replace(cap, feature=shifted), ref)[0]
    assert f.status == "fail" and f.observed == 1
    assert checks.check_feature_alignment(tiny_contract, cap, ref)[0].status == "pass"


def test_target_alignment_catches_unshifted_verifier(tiny_contract, cap, ref):
    unshifted = ref.boundary("B_8")[cap.rows].to(torch.bfloat16)
    f = checks.check_target_alignment(tiny_contract, replace(cap, verifier_last=unshifted), ref)[0]
    assert f.status == "fail" and f.observed == 0


def test_input_token_and_loss_mask_alignment(tiny_contract, cap):
    bad = replace(cap, draft_input_ids=cap.token_ids[cap.rows])
    assert _status(checks.check_input_token_alignment(tiny_contract, bad), "input_token_alignment") == {"fail"}
    mask = cap.source_loss_mask.clone()
    mask[: len(mask) // 2] = 0
    mask[len(mask) // 2:] = 1
    good = replace(cap, source_loss_mask=mask, loss_mask=mask[cap.rows + 1])
    bad = replace(cap, source_loss_mask=mask, loss_mask=mask[cap.rows])
    assert _status(checks.check_loss_mask_alignment(tiny_contract, good), "loss_mask_alignment") == {"pass"}
    assert _status(checks.check_loss_mask_alignment(tiny_contract, bad), "loss_mask_alignment") == {"fail"}


def test_position_alignment(tiny_contract, cap):
    assert _status(checks.check_position_alignment(tiny_contract, replace(cap, position_ids=cap.rows)),
                   "position_alignment") == {"fail"}
    frozen = torch.full_like(cap.position_ids, 1)  # positions not advanced
    assert _status(checks.check_position_alignment(tiny_contract, replace(cap, position_ids=frozen)),
                   "position_alignment") == {"fail"}


def test_cross_path(tiny_contract, cap):
    other = replace(cap, path="sglang-extend")
    assert checks.check_cross_path(tiny_contract, cap, other)[0].status == "pass"
    f = cap.feature.clone()
    f[2] = -f[2]
    assert checks.check_cross_path(tiny_contract, cap, replace(other, feature=f))[0].status == "fail"
    narrow = replace(other, feature=cap.feature[:, :64])
    assert checks.check_cross_path(tiny_contract, cap, narrow)[0].status == "fail"


def test_checks_do_not_modify_inputs(tiny_contract, cap, ref):
    before = (cap.feature.clone(), cap.verifier_last.clone(), ref.stack.clone())
    checks.run_checks(tiny_contract, cap, ref)
    assert torch.equal(before[0], cap.feature) and torch.equal(before[1], cap.verifier_last)
    assert torch.equal(before[2], ref.stack)


def test_slot_identity_says_no_match_for_a_foreign_tensor(tiny_contract, cap, ref):
    g = torch.Generator().manual_seed(0)
    foreign = torch.randn(cap.feature.shape[0], 64, generator=g)
    feat = torch.cat([foreign, ref.boundary("B_4")[cap.rows], ref.boundary("B_5")[cap.rows]], -1)
    f0 = checks.check_slot_identity(tiny_contract, replace(cap, feature=feat), ref)[0]
    assert f0.status == "fail" and f0.observed == "none"
    assert "matches no boundary of the reference" in f0.message


def test_fc_shape_catches_fc_sized_from_the_draft_width(tiny_contract, cap):
    good = replace(cap, provenance={**cap.provenance, "fc_in_features": 192, "fc_out_features": 64})
    assert _status(checks.check_fc_shape(tiny_contract, good), "fc_shape") == {"pass"}
    # K6: 3 x draft width instead of 3 x target width (here the contract's target is 96 wide)
    wide = contract_with(tiny_contract, **{"target.hidden_size": 96, "draft.target_hidden_size": 96,
                                           "capture.feature_width": 288})
    assert _status(checks.check_fc_shape(wide, good), "fc_shape") == {"fail"}
    assert checks.check_fc_shape(tiny_contract, cap) == []  # no draft on the training path


def test_engine_version_never_passes_an_unlisted_release(tiny_contract):
    assert checks.check_engine_version(tiny_contract, "0.5.23")[0].status == "pass"
    f = checks.check_engine_version(tiny_contract, "0.5.12")[0]
    assert f.status == "skip" and "not among the validated versions" in f.message
    none = contract_with(tiny_contract, **{"engines.sglang_validated": []})
    assert checks.check_engine_version(none, "0.5.23")[0].status == "skip"


def test_massive_row_of_a_one_row_capture_is_judged_against_the_band(tiny_contract, cap):
    """With a calibrated band, a one-row capture's massive activation (RMS far above the band's
    centre) is excluded, not failed: the capture's own median cannot exclude its only row. A
    normal row outside the band still fails."""
    from eagle3_conformance.contract import NormBand

    c = tiny_contract.model_copy(update={"norm_bands": tiny_contract.norm_bands.model_copy(update={
        "status": "calibrated", "massive_activation_ratio": 20.0,
        "bands": [NormBand(slot="B_2", lo=0.5, hi=2.0)]})})
    row = torch.zeros(1, 3 * 64)
    one = replace(cap, feature=row, rows=torch.tensor([3]), verifier_last=None)
    massive = row.clone()
    massive[0, :64] = 500.0  # RMS 500, 354x the band centre
    f = next(f for f in checks.check_norm_bands(c, replace(one, feature=massive)) if f.slot == "slot 0")
    assert f.status == "skip" and "excluded" in f.message
    low = row.clone()
    low[0, :64] = 0.1  # RMS 0.1, below the band: a real band failure
    f = next(f for f in checks.check_norm_bands(c, replace(one, feature=low)) if f.slot == "slot 0")
    assert f.status == "fail"


def _direct_profile(slot, rows, ref, keep):
    """The cosine profile as computed before it was memoized (identity.py at b7aa74e): the oracle of the memo."""
    x = torch.nn.functional.normalize(slot.float()[keep], dim=-1, eps=1e-8)
    return (ref.unit[:, rows[keep]] * x[None]).sum(-1).mean(-1)


def test_a_memoized_profile_is_the_direct_one_and_a_changed_slot_is_computed_again(tiny_contract, cap, ref):
    from eagle3_conformance.checks.identity import similarity_profile

    keep = checks.keep_rows(tiny_contract, cap.rows)
    slot = cap.slots(tiny_contract.draft.target_hidden_size)[1]
    want = _direct_profile(slot, cap.rows, ref, keep)
    for _ in range(2):  # computed, then read back: bit for bit the direct profile, a tensor of its own
        got = similarity_profile(slot, cap.rows, ref, keep)
        assert torch.equal(got, want)
        got.zero_()
    changed = slot.clone()
    changed[0] = -changed[0]  # another slot with the same shape: its own profile
    assert torch.equal(similarity_profile(changed, cap.rows, ref, keep), _direct_profile(changed, cap.rows, ref, keep))
    fewer = keep.clone()
    fewer[int(keep.nonzero()[0])] = False
    assert torch.equal(similarity_profile(slot, cap.rows, ref, fewer), _direct_profile(slot, cap.rows, ref, fewer))
    assert not torch.equal(_direct_profile(slot, cap.rows, ref, fewer), want)


def test_memoized_profiles_change_no_finding_on_the_real_pair(monkeypatch):
    """On the real pair (SmolLM2-135M: its stored bf16 data, its float32 reference), every check's findings
    with the memoized profiles equal the findings with the direct profile (a fresh reference each time), and
    the clean data's faults still fail: a slot swapped with its neighbour boundary (slot_identity, slot_order)."""
    from eagle3_conformance.checks import identity
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.testbed.fixtures import build_fixture
    from eagle3_conformance.tools.speculators_loader import TrainingLoader

    smol = build_fixture("smollm2-135m")
    c = load_contract(REPO / "contracts" / "smollm2-135m.yaml")
    loader = TrainingLoader(smol.data_dir, c.draft.target_hidden_size, c.num_slots, torch.bfloat16)
    idx = [i for i in range(len(loader)) if 8 <= len(loader.dataset_row(i)["input_ids"]) <= 160][:4]
    assert len(idx) == 4
    model = load_reference_model(smol.target_dir, c.target)
    d = c.draft.target_hidden_size
    for cap in loader.batch(idx):
        ref = model.capture(cap.token_ids)
        swapped = replace(cap, feature=torch.cat([cap.feature[:, d:2 * d], cap.feature[:, :d], cap.feature[:, 2 * d:]], -1))
        for one in (cap, swapped):
            fresh = replace(ref)  # a Reference without the memo
            new = checks.run_checks(c, one, fresh)
            assert checks.run_checks(c, one, fresh) == new  # read back from the memo
            with monkeypatch.context() as m:
                m.setattr(identity, "similarity_profile", _direct_profile)
                old = checks.run_checks(c, one, replace(ref))
            assert new == old
        assert _status(new, "slot_identity") >= {"fail"} and _status(new, "slot_order") == {"fail"}
        assert _status(checks.run_checks(c, cap, replace(ref)), "slot_order") == {"pass"}
