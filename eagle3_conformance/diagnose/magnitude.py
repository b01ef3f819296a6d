"""Diagnoses of the magnitude checks (checks/magnitude.py): the right direction at the wrong
magnitude (normalized without its weights, rescaled)."""

from __future__ import annotations

from eagle3_conformance.contract import Contract
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.diagnose.base import Diagnosis, _PathView, _slot_index
from eagle3_conformance.diagnose.fixes import _Fixer
from eagle3_conformance.diagnose.precision import used_precision


def _magnitude(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    # the check itself skips slots that point elsewhere, so its failures are its own
    if "transfer_backend" in used:
        return []  # FP8 read as plain files: the fp8-transport diagnosis names the cause
    bad: dict[str, list[Finding]] = {}
    for f in v.failing("magnitude"):
        if f in used_precision(used):
            continue  # half-precision noise (production-precision names it)
        if isinstance(f.observed, dict) and "rms_ratio" in f.observed:
            bad.setdefault(f.slot or "", []).append(f)
    out = []
    for label, fs in sorted(bad.items(), key=lambda kv: _slot_index(kv[0]) if kv[0] != "verifier" else 10**7):
        ob = fs[0].observed
        r = sorted(float(f.observed["rms_ratio"]) for f in fs)[len(fs) // 2]
        srms = sorted(float(f.observed["slot_rms"]) for f in fs)[len(fs) // 2]
        sspread = max(float(f.observed.get("slot_rms_spread", 99)) for f in fs)
        rspread = max(float(f.observed.get("ratio_spread", 99)) for f in fs)
        declared = next((str(b) for i, b in enumerate(c.aux) if f"slot {i}" == label), c.verifier_last.tensor)
        ev = [f"{label} points the way of {declared} (cos {float(ob.get('cos', 1)):.4f}) but its per-token RMS is "
              f"{r:.3g}x the reference's (median over samples)"]
        if abs(srms - 1) < 0.1 and sspread < 1.1:
            fault, title = "K4", f"{label} is normalized without its norm weights (per-token RMS 1)"
            ev.append(f"its own per-token RMS is {srms:.3g} on every token: an RMSNorm output without the weight")
            fix = (f"store {declared} itself (the residual stream, pre-norm) as the contract declares; a post-norm "
                   "capture must keep the norm's weight (x / rms(x) * w)",)
        elif rspread < 1.1:
            fault, title = "K12", f"{label} is {declared} rescaled by a constant factor {r:.3g}"
            ev.append("the ratio is the same on every token: a scale, not a norm (quantized values read without "
                      "their scales, a stray multiplier)")
            fix = ("dequantize before storing or comparing (FP8 per-token / per-tensor scales; contract dtypes), or "
                   "remove the stray factor",)
        else:
            fault, title = "K4", f"{label} has the wrong magnitude for {declared}"
            fix = (f"store {declared} as the reference computes it (residual stream, no norm, no scale)",)
        ev.append("fingerprints are scale-free; the norm bands could not see it"
                  + (" (uncalibrated)" if c.norm_bands.status != "calibrated" else ""))
        n_all = len([f for f in v.by_check.get("magnitude", []) if f.slot == label and f.status != "skip"])
        out.append(Diagnosis("magnitude", fault, title, tuple(ev), fix, (v.path,), (label,),
                             ("magnitude",) + (("norm_band",) if v.failing("norm_band") else ()),
                             {v.path: f"{len(fs)}/{n_all} {v.unit}"}))
    used.add("magnitude")
    return out
