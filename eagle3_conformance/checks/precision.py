"""``production_precision``: is the data's noise against the float32 reference that of the precision the
contract says it was produced in (``precision.training`` / ``precision.serving``, else ``target.dtype``)?

Why: the identity, row, cross-path, magnitude and FP8 gates are set by the declared production
precision (:mod:`eagle3_conformance.gates`). Correct data produced in bfloat16 from a float32
checkpoint (vLLM's and SGLang's ``dtype="auto"`` serve float32 checkpoints in half precision) fails
the float32 gates on the few tokens where activations jump, and those failures look like faults
(K13 rows of other tokens, K12 FP8 scaling). This check measures the noise itself, so that the
report says "produced in lower precision than declared; change this key" instead of a fault kind
(:func:`eagle3_conformance.diagnose` reads it first).

The statistic: the median, over every resolvable row of every slot whose best-matching boundary is
the declared one, of the angle between the row and its reference boundary. Measured on
SmolLM2-135M-Instruct over the 92 corpus items (docs/gates.md, "Production precision"): float32 boundaries stored as bf16 give per-sample, per-depth medians of
0.03..0.15 deg; a bf16 forward 0.13..2.23 deg (median 0.64). A median above
:data:`FLOAT32_MEDIAN_ANGLE_DEG` (0.3 deg, twice the worst float32 case) is not float32 production.
A median is robust against a minority of moved rows (K13), which leave the other rows exact; a median
beyond :data:`NOISE_MEDIAN_MAX_DEG` (most rows elsewhere) is no precision's noise and is not judged.
Only a float32 declaration can be refuted this way (half-precision noise has no upper band that
separates it from faults); FP8 transport (``training.transfer: fp8``) adds its own noise (median
relative error 0.026, about 1.5 deg) and is not judged.
"""

from __future__ import annotations

import math

import torch

from eagle3_conformance import gates
from eagle3_conformance.capture import Capture
from eagle3_conformance.checks.common import finding, keep_rows, usable, verifier_rows
from eagle3_conformance.checks.identity import identify, resolvable
from eagle3_conformance.checks.registry import REFERENCE, check
from eagle3_conformance.contract import Contract
from eagle3_conformance.findings import Finding
from eagle3_conformance.notation import Boundary
from eagle3_conformance.reference import Reference

#: median per-row angle (degrees) above which data is not float32-produced (see the module docstring)
FLOAT32_MEDIAN_ANGLE_DEG = 0.3
#: above this median the rows are not a precision's noise at all (most rows belong elsewhere: a fault
#: the other checks name): the bf16 per-sample allowance, itself above the 5.24 deg worst bf16 noise measured
NOISE_MEDIAN_MAX_DEG = gates.IDENTITY_NOISE_DEG["bfloat16"]
PRECISION_CHECK = "production_precision"


def precision_key(stored: bool) -> str:
    """The contract key that states the production precision of stored training data or of a serving capture."""
    return "precision.training" if stored else "precision.serving"


def _slot_angles(c: Contract, cap: Capture, ref: Reference) -> list[torch.Tensor]:
    d = c.draft.target_hidden_size
    keep = keep_rows(c, cap.rows)
    max_cos = gates.resolvable_max_cosine(c)
    pairs: list[tuple[torch.Tensor, torch.Tensor, Boundary, torch.Tensor]] = [
        (s, cap.rows, c.aux[i], keep) for i, s in enumerate(cap.slots(d)) if i < c.num_slots and s.shape[-1] == d]
    if cap.verifier_last is not None and cap.verifier_last.shape[-1] == d:
        vr = verifier_rows(c, cap)
        ok = (vr >= 0) & (vr < ref.stack.shape[1])
        if bool(ok.all()) and cap.verifier_last.shape[0] == vr.shape[0]:
            pairs.append((cap.verifier_last, vr, Boundary.parse(c.verifier_last.tensor), keep_rows(c, vr)))
    out = []
    for x, rows, b, k in pairs:
        k = k & resolvable(ref, b, rows, max_cos)
        if not bool(k.any()) or identify(x, rows, ref, k)[0] != b:
            continue  # another boundary: a slot fault, not noise (the identity checks say which)
        cos = torch.nn.functional.cosine_similarity(x.float()[k], ref.boundary(b)[rows[k]], dim=-1)
        out.append(torch.rad2deg(torch.acos(cos.clamp(-1.0, 1.0))))
    return out


@check(REFERENCE, ("K12",))
def check_production_precision(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """The data's noise against the reference is within the declared production precision's.

    Inputs: ``cap.feature`` [N, K*d] (and ``cap.verifier_last`` [N, d]), ``cap.rows`` [N] into
    ``ref.stack`` [L+2, T, d] float32. One finding per capture: fail when its kind is declared
    float32 and the median per-row angle exceeds :data:`FLOAT32_MEDIAN_ANGLE_DEG`; the observed
    dict carries ``median_row_angle_deg``, ``declared`` and ``key`` (the contract key to change).
    """
    key = precision_key(cap.stored)
    declared = gates.precision(c, cap.stored)
    if cap.stored and c.training.transfer == "fp8":
        return [finding(PRECISION_CHECK, "skip", cap, "feature", declared, None,
                   "FP8 transport adds its own noise: production precision not judged (fp8_scale_error judges it)", "K12")]
    if not usable(cap, c.draft.target_hidden_size) or cap.width != c.capture.feature_width \
            or int(cap.rows.min()) < 0 or int(cap.rows.max()) >= ref.stack.shape[1]:
        return [finding(PRECISION_CHECK, "skip", cap, "feature", declared, None, "rows do not split into the declared slots", "K12")]
    angles = _slot_angles(c, cap, ref)
    if not angles:
        return [finding(PRECISION_CHECK, "skip", cap, "feature", declared, None,
                   "no slot matches its declared boundary on a resolvable row: nothing to measure", "K12")]
    med = float(torch.cat(angles).median())
    obs = {"median_row_angle_deg": round(med, 4), "declared": declared, "key": key}
    if med > NOISE_MEDIAN_MAX_DEG:
        return [finding(PRECISION_CHECK, "skip", cap, "feature", declared, obs,
                   f"median per-row angle to the reference {med:.1f} deg: beyond any precision's noise "
                   f"({NOISE_MEDIAN_MAX_DEG:g} deg); most rows are not their boundary (the other checks say why)", "K12")]
    if declared != "float32" or med <= FLOAT32_MEDIAN_ANGLE_DEG:
        return [finding(PRECISION_CHECK, "pass", cap, "feature", declared, obs,
                   f"median per-row angle to the reference {med:.3f} deg: consistent with {key} {declared}", "K12")]
    return [finding(PRECISION_CHECK, "fail", cap, "feature", declared, obs,
               f"median per-row angle to the reference {med:.3f} deg > {FLOAT32_MEDIAN_ANGLE_DEG} deg (float32 "
               f"production measured <= 0.15 deg): these hidden states were produced in lower precision than "
               f"{key}: float32 says (cosine {math.cos(math.radians(med)):.5f} per row)", "K12", key)]
