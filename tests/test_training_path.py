"""The training-loader path end to end: data written in the speculators 0.9.0 format, read by the
real speculators ArrowDataset + CollateFn(shift_batch), checked against the contract.

Includes the seed incident: on-disk slots [B_0, B_a, B_b, B_c] (embedding first, no verifier
slot) against a contract that says aux [B_a, B_b, B_c] + verifier B_L."""

from __future__ import annotations

from eagle3_conformance.suite import runner
from eagle3_conformance.testbed.datagen import write_speculators_dataset
from eagle3_conformance.testbed.fixtures import sample_token_ids


def _data(tmp_path, tiny, tiny_ref, slots, name="data", n=5, **kw):
    samples = sample_token_ids(tiny.spec, n, 3, 20, seed=7)
    return write_speculators_dataset(tmp_path / name, tiny_ref, samples, slots=slots, **kw)


def _fails(findings):
    return [f for f in findings if f.status == "fail"]


def test_correct_layout_passes(tmp_path, tiny, tiny_ref, tiny_contract):
    data = _data(tmp_path, tiny, tiny_ref, ["B_2", "B_4", "B_5", "B_8"])
    fs = runner.training_findings(tiny_contract, data, tiny.target_dir, [[0, 1], [2, 3, 4]])
    assert not _fails(fs)
    assert sum(f.check == "slot_identity" and f.status == "pass" for f in fs) == 15


def test_seed_incident_embedding_first_no_verifier_slot(tmp_path, tiny, tiny_ref, tiny_contract):
    """Slots [B_0, B_2, B_4, B_5] on disk; the loader silently routes [B_0, B_2, B_4] to fc and B_5
    to the verifier. The suite must fail and name slot 0 as the embedding."""
    data = _data(tmp_path, tiny, tiny_ref, ["B_0", "B_2", "B_4", "B_5"])
    fs = runner.training_findings(tiny_contract, data, tiny.target_dir, [[0, 1, 2, 3, 4]])
    ident = [f for f in fs if f.check == "slot_identity" and f.slot == "slot 0"]
    assert ident and all(f.status == "fail" for f in ident)
    assert all("slot 0 is B_0 (embedding output); contract says B_2" in f.message for f in ident)
    assert any(f.check == "no_embedding" and f.status == "fail" for f in fs)
    ver = [f for f in fs if f.check == "verifier_identity"]
    assert ver and all(f.status == "fail" and f.observed == "B_5" for f in ver)
    # widths and dtypes are all fine: shape checks prove nothing here
    assert all(f.status == "pass" for f in fs if f.check in ("feature_width", "slot_count", "dtype"))


def test_final_norm_output_stored_as_verifier(tmp_path, tiny, tiny_ref, tiny_contract):
    data = _data(tmp_path, tiny, tiny_ref, ["B_2", "B_4", "B_5", "F"])
    fs = runner.training_findings(tiny_contract, data, tiny.target_dir, [[0, 1, 2]])
    assert any(f.check == "verifier_norm_state" and f.status == "fail" for f in fs)
    assert any(f.check == "verifier_identity" and f.observed == "F" for f in fs)


def test_too_few_slots_on_disk(tmp_path, tiny, tiny_ref, tiny_contract):
    """K3: the final layer was unreachable, 3 slots stored instead of 4: fc gets 2 slots."""
    data = _data(tmp_path, tiny, tiny_ref, ["B_2", "B_4", "B_8"])
    fs = runner.training_findings(tiny_contract, data, tiny.target_dir, [[0, 1]])
    assert any(f.check == "slot_count" and f.status == "fail" for f in fs)


def test_dtype_on_disk(tmp_path, tiny, tiny_ref, tiny_contract):
    data = _data(tmp_path, tiny, tiny_ref, ["B_2", "B_4", "B_5", "B_8"], dtype="float32")
    fs = runner.training_findings(tiny_contract, data, tiny.target_dir, [[0]])
    assert any(f.check == "dtype" and f.slot == "on disk" and f.status == "fail" for f in fs)


def test_token_id_mismatch_and_missing_shard_are_reported(tmp_path, tiny, tiny_ref, tiny_contract):
    data = _data(tmp_path, tiny, tiny_ref, ["B_2", "B_4", "B_5", "B_8"])
    from safetensors.torch import load_file, save_file

    p = data / "hidden_states" / "hs_1.safetensors"
    d = load_file(p)
    d["token_ids"] = d["token_ids"].clone()
    d["token_ids"][1] += 1
    save_file(d, p)
    (data / "hidden_states" / "hs_3.safetensors").unlink()
    fs = runner.training_findings(tiny_contract, data, tiny.target_dir, [[0, 1, 2, 3, 4]])
    bad = {f.where: f.message for f in fs if f.check == "sample_available" and f.status == "fail"}
    assert set(bad) == {"sample 1 (batch position 1)", "sample 3 (batch position 3)"}
    assert "missing" in bad["sample 3 (batch position 3)"]
    # the other samples are still checked
    assert sum(f.check == "slot_identity" and f.status == "pass" for f in fs) == 9


def test_hypothesis_batches_keep_samples_apart(tiny_contract, tiny_loader, tiny_ref):
    """Packing several samples into one batch must not move rows across documents."""
    from hypothesis import given, settings

    from eagle3_conformance.checks import check_feature_alignment, check_slot_identity
    from eagle3_conformance.suite.strategies import sample_batches

    n = len(tiny_loader)

    @settings(max_examples=6, derandomize=True, deadline=None, database=None)
    @given(sample_batches(n))
    def prop(batch):
        for cap in tiny_loader.batch(batch):
            if len(cap.rows) < 2:
                continue
            ref = tiny_ref.capture(cap.token_ids)
            fs = check_slot_identity(tiny_contract, cap, ref) + check_feature_alignment(tiny_contract, cap, ref)
            assert all(f.status == "pass" for f in fs), fs

    prop()
