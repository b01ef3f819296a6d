"""Issue 37 (the 2026 field reports R53-R82): the holes found on a held-out real model, bad-input
refusals of ``validate``, and the pure checks added for the reports.

Data is written by the real speculators 0.9.0 preprocessing (:func:`eagle3_conformance.datagen.
write_speculators_dataset`) from the tiny-llama fixture's reference forward; faults are injected the
way a user's writer causes them (the planes it stores); what a plane holds is judged against the
reference, never against the writer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3_conformance.cli import main
from eagle3_conformance.fixtures import sample_token_ids

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "contracts" / "tiny-llama.yaml"
AUX = ["B_2", "B_4", "B_5"]  # contracts/tiny-llama.yaml; verifier_last B_8 (L = 8)


@pytest.fixture(scope="module")
def spec_write(tiny, tiny_ref, tmp_path_factory):
    """``spec_write(slots)``: a fresh speculators dataset of 5 samples whose planes hold ``slots``."""
    from eagle3_conformance.datagen import write_speculators_dataset

    samples = sample_token_ids(tiny.spec, 5, 6, 16, seed=37)

    def _w(slots):
        return write_speculators_dataset(tmp_path_factory.mktemp("spec") / "data", tiny_ref, samples, slots=slots)
    return _w


def _check_data(tmp_path, capsys, data, *extra):
    out = tmp_path / f"r{len(list(tmp_path.glob('r*.json')))}.json"
    rc = main(["check-data", str(TINY), "--data", str(data), "--quiet", "--json", str(out), *map(str, extra)])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err + cap.out
    return rc, json.loads(out.read_text()), cap


def test_speculators_data_without_the_verifier_plane_is_named_verifier_missing(spec_write, tiny, tmp_path, capsys):
    """N = K planes in speculators' layout (a writer without the verifier plane): speculators' reader
    takes the last aux plane (B_5) as the verifier and K - 1 aux slots. Before issue 37 the report said
    slot-count 2 and "the verifier is B_5" and never that the verifier was missing."""
    good = spec_write(AUX + ["B_8"])
    rc, doc, _ = _check_data(tmp_path, capsys, good, "--reference", tiny.target_dir, "--sample", 2)
    assert rc == 0 and not [f for f in doc["findings"] if f["check"] == "verifier_present"]
    rc, doc, cap = _check_data(tmp_path, capsys, spec_write(AUX), "--reference", tiny.target_dir, "--sample", 2)
    assert rc == 1
    vp = [f for f in doc["findings"] if f["check"] == "verifier_present" and f["status"] == "fail"]
    assert {f["path"] for f in vp} == {"training-disk", "training"}
    assert all("B_8" in f["message"] and "missing" in f["message"] for f in vp)
    assert [d["kind"] for d in doc["diagnoses"]] == ["verifier-missing"]
    d = doc["diagnoses"][0]
    assert set(d["paths"]) == {"training-disk", "training"} and "B_5" in d["title"]
    assert {"slot_count", "verifier_identity", "verifier_present"} <= set(d["checks"])


def test_speculators_data_missing_an_aux_plane_is_not_called_verifier_missing(spec_write, tiny):
    """N = K the other way round (B_4 dropped, B_8 stored last): the fingerprint sample finds the verifier
    slot is B_8, so the training path names slot-count / slot-off, never verifier-missing."""
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.diagnose import path_diagnoses
    from eagle3_conformance.scan import scan

    c = load_contract(TINY)
    res = scan(c, spec_write(["B_2", "B_5", "B_8"]), sample=2, reference_dir=tiny.target_dir)
    kinds = {d.kind for d in path_diagnoses(c, res.findings) if d.paths == ("training",)}
    assert "verifier-missing" not in kinds and kinds & {"slot-count", "slot-off"}


def test_final_norm_output_in_the_deepest_aux_slot_is_diagnosed(spec_write, tiny, tmp_path, capsys):
    """F (post final norm) written where the contract declares B_5 (a generator that stores
    output_hidden_states[L], which transformers ties to last_hidden_state): slot_identity names F in
    slot 2 and the diagnosis ``final-norm-in-aux`` says so (before: no diagnosis at all)."""
    rc, doc, _ = _check_data(tmp_path, capsys, spec_write(["B_2", "B_4", "F", "B_8"]), "--reference",
                             tiny.target_dir, "--sample", 2)
    assert rc == 1
    kinds = [d["kind"] for d in doc["diagnoses"]]
    assert kinds == ["final-norm-in-aux"], kinds
    d = doc["diagnoses"][0]
    assert d["slots"] == ["slot 2"] and "B_5" in d["title"] and "slot_identity" in d["checks"]
