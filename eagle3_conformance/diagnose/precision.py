"""Diagnoses of the precision checks (checks/precision.py): a target served in another dtype than
``precision.serving`` (``serving-dtype``), data produced in a lower precision than the contract's precision
block declares (``production-precision``), stored data of another dtype (``generation-dtype``); the findings
they claim (:func:`used_precision`)."""

from __future__ import annotations

from collections import Counter

from eagle3_conformance.contract import Contract
from eagle3_conformance.core.findings import Finding, stored_path
from eagle3_conformance.core.served_dtype import served_dtype_words
from eagle3_conformance.diagnose.base import Diagnosis, _PathView
from eagle3_conformance.diagnose.fixes import _Fixer

_PRECISION_CHECKS = ("row_fingerprint", "fp8_scale_error", "cross_path", "magnitude")
_PRECISION_GATES = ("gates.slot_identity_min_cosine", "gates.cross_path_min_cosine", "gates.fp8_max_relative_error")


class _PrecisionClaims(tuple):
    """The failing findings production-precision explains, kept in a rule's ``used`` set."""

    def __new__(cls, fs):
        return super().__new__(cls, (id(f) for f in fs))

    def __contains__(self, f) -> bool:
        return tuple.__contains__(self, id(f))


def used_precision(used: set) -> _PrecisionClaims:
    return next((u for u in used if isinstance(u, _PrecisionClaims)), _PrecisionClaims(()))


def _within_half(f: Finding) -> bool:
    """A magnitude failure within the half-precision band (3x, gates.MAGNITUDE_MAX_RATIO); others always."""
    if f.check != "magnitude":
        return True
    r = f.observed.get("rms_ratio") if isinstance(f.observed, dict) else None
    return r is not None and 1 / 3 <= float(r) <= 3


def _production_precision(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """``production_precision`` failed: the data was produced in lower precision than declared
    (:func:`eagle3_conformance.checks.check_production_precision`). Runs first, so that the noise it explains is never
    named as a fault (K13 rows of other tokens, K12 FP8 scaling)."""
    bad = v.failing("production_precision")
    if not bad or "production_precision" in used:
        return []
    ob = bad[0].observed if isinstance(bad[0].observed, dict) else {}
    key, declared = ob.get("key", "precision"), ob.get("declared", "float32")
    med = sorted(float(f.observed.get("median_row_angle_deg", 0)) for f in bad if isinstance(f.observed, dict))
    n_all = len([f for f in v.by_check.get("production_precision", []) if f.status != "skip"])
    claimed = ("production_precision",) + _claim_noise(v, used)
    return [Diagnosis(
        "production-precision", "", f"these hidden states were produced in lower precision than the contract "
        f"declares ({key}: {declared})",
        (f"{len(bad)} of {n_all} {v.unit}: median per-row angle to " + (
            f"{ob['against']} {med[len(med) // 2]:.3f} deg (float32 values through FP8 land on the same codes: 0 deg; "
            "a bf16 forward through FP8 measured 0.9..1.5 deg on SmolLM2-135M)" if ob.get("against") else
            f"the float32 reference {med[len(med) // 2]:.3f} deg (float32 production measured <= 0.15 deg; a bf16 "
            "forward 0.13..2.2 deg)"),
         "the failures below are that precision's noise judged by float32 gates, not a fault: "
         + ", ".join(claimed[1:]) if len(claimed) > 1 else "no other check failed on it"),
        (f"set {key}: bfloat16 (or float16: the dtype the target actually ran in; vLLM's and SGLang's "
         "dtype=auto serve a float32 checkpoint in half precision) and run again; `eagle3-conformance init "
         "--engine ...` derives it",
         f"or, if the contract is right, produce the data in {declared} (the engine's --dtype {declared})"),
        (v.path,), ("feature",), claimed, {v.path: f"{len(bad)}/{n_all} {v.unit}"})]


def _claim_noise(v: _PathView, used: set) -> tuple[str, ...]:
    """Claim the failures of the precision gates within half precision's band (the noise of a lower
    precision than declared) into ``used``; the checks claimed, in order."""
    noise = [f for f in v.findings if f.status == "fail" and (f.check in _PRECISION_CHECKS or f.gate in
                                                                _PRECISION_GATES) and _within_half(f)]
    claimed = tuple(dict.fromkeys(f.check for f in noise))
    used.add(_PrecisionClaims(noise))
    # a check every failure of which is this noise is accounted for (the other rules leave it alone)
    used.update(ch for ch in claimed if all(any(f is g for g in noise) for f in v.failing(ch)))
    return claimed


def _serving_dtype(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """``dtype`` failed on a serving path: the target was served in another dtype than ``precision.serving``
    (check-captures on a user's server; an engine path run with ``CONFORMANCE_ENGINE_DTYPE``). The words and
    both fixes, in every direction, are :func:`eagle3_conformance.core.served_dtype.served_dtype_words`'s, the
    same wherever it is found. Runs before ``production-precision``: where the served dtype is lower than
    declared, the noise that check measures is this dtype's, and it is claimed here."""
    if stored_path(v.path):
        return []
    bad = [f for f in v.failing("dtype") if f.slot in ("feature", "verifier")]
    if not bad:
        return []
    served = Counter(str(f.observed) for f in bad).most_common(1)[0][0]
    declared = str(bad[0].expected)
    if served == declared:
        return []
    w = served_dtype_words(declared, served)
    used.update(("dtype", "production_precision"))
    noise = _claim_noise(v, used) if declared == "float32" else ()
    claimed = tuple(dict.fromkeys(("dtype",) + (("production_precision",) if v.failing("production_precision")
                                                 else ()) + noise))
    n = len({f.where for f in bad})
    return [Diagnosis("serving-dtype", "", w.title, w.evidence, w.fix, (v.path,), ("feature",), claimed,
                      {v.path: f"{n} {v.unit}"})]


def _generation_dtype(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """``dtype`` failed on stored data while no slot failed identity: the data was generated in another dtype
    than ``data_dtype`` and means what the contract says. It still fails (docs/speculators-generator.md, "A
    stored dtype other than data_dtype"); this names the one change that settles it."""
    if not stored_path(v.path):
        return []
    bad = [f for f in v.failing("dtype") if f.slot in ("on disk", "feature", "verifier")]
    if not bad or not v.slots_intact:
        return []
    stored = Counter(str(f.observed) for f in bad if f.slot in ("on disk", "feature")).most_common(1)
    got = stored[0][0] if stored else str(bad[0].observed)
    n = len({f.where for f in bad})
    used.add("dtype")
    return [Diagnosis(
        "generation-dtype", "", f"the data is stored in {got}, the contract declares data_dtype: {c.data_dtype}; "
        "every slot holds its declared boundary",
        (f"stored as {got}; slot_identity and verifier_identity pass: the slots mean what the "
         "contract says, only the generation dtype differs",
         "the stored dtype is what the generation server computes in (speculators' generate-offline-data: its vLLM "
         "server's --dtype; SpecForge: its SGLang capture's dtype)"),
        (f"if the data is right: `eagle3-conformance init ... --generation-dtype {got}` (or set data_dtype: {got} "
         f"and precision.training: {got}) and run again",
         f"if the contract is right: run the generation server with --dtype {c.data_dtype} and generate again"),
        (v.path,), ("on disk",), ("dtype",), {v.path: f"{n} {v.unit}"})]
