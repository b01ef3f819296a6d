"""Diagnoses of the row-fingerprint check (checks/row_fingerprint.py): slot identity holds on
average but individual rows belong to other tokens or requests."""

from __future__ import annotations

from eagle3_conformance.contract import Contract
from eagle3_conformance.diagnose.base import Diagnosis, _explained, _PathView
from eagle3_conformance.diagnose.fixes import _Fixer


def _rows_misassigned(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    if "row_fingerprint" in used or "slot_identity" in used:
        return []
    bad = v.failing("row_fingerprint")
    if not bad or any(j.wrong for j in v.aux()):
        return []
    n_all = len([f for f in v.by_check.get("row_fingerprint", []) if f.status != "skip"])
    used.update({"row_fingerprint", "feature_alignment", "target_alignment", "slot_identity", "verifier_identity",
                 "norm_band", "magnitude"})
    return [Diagnosis(
        "rows-misassigned", "K13", "some rows hold the hidden states of other tokens or requests",
        (f"{len(bad)} of {n_all} {v.unit} have rows that are not the declared boundary of their own token, while "
         "every slot still resembles its declared boundary most",),
        ("keep rows with their request: split a batch's flat rows by each request's own offsets (no sort of "
         "request ids as strings), gather token-sharded rows before storing",),
        (v.path,), ("feature",), _explained(v, ("row_fingerprint", "feature_alignment", "target_alignment",
                                                "slot_identity", "verifier_identity", "norm_band")),
        {v.path: f"{len(bad)}/{n_all} {v.unit}"})]
