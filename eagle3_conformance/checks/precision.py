"""``production_precision``: is the data's noise against the float32 reference that of the precision the
contract says it was produced in (``precision.training`` / ``precision.serving``, else ``target.dtype``)?

Why: the identity, row, cross-path, magnitude and FP8 gates are set by the declared production
precision (:mod:`eagle3_conformance.core.gates`). Correct data produced in bfloat16 from a float32
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
separates it from faults).

FP8 payloads (hs-connectors' ``FP8HiddenStatesConnector``, read with ``FP8Transfer``) carry FP8's own
noise (median relative error 0.026, about 1.5 deg), which would mask the signal. They are compared,
instead, with the reference as the connector would have written it from float32 values: the [T, N, H]
stack of the declared planes (aux ascending, verifier last, as the file holds them) through
hs-connectors' own ``quantize_tensor_to_fp8`` and ``dequantize_fp8_tensor`` (fp8_utils.py:29-58),
the float32 values handed over as float32, bfloat16 or float16 (the file does not record which; the
closest is taken). Float32-produced data then lands on the same FP8 codes (angle 0 on CPU; a float32
forward on other hardware differs by ~1e-6 relative, which flips a code with probability ~1e-5); data
produced in bfloat16 lands on other codes wherever its noise crosses a rounding midpoint, which
amplifies it (measured in docs/gates.md, "Production precision", FP8 rows). The same thresholds apply.
The reference is quantised with the file's own per-token scales (``hidden_states_scales``), so a scale
fault (a massive value that coarsens a token's small slots: ``fp8_scale_error``) leaves those slots on
the reference's codes, at one token or at every token; only the rows holding the stray value move.
FP8 payloads read without ``FP8Transfer`` (values never rescaled) are not judged (``transfer_backend``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional

from eagle3_conformance.checks.common import finding, keep_rows, usable, verifier_rows
from eagle3_conformance.checks.identity import identify, resolvable
from eagle3_conformance.checks.registry import REFERENCE, check
from eagle3_conformance.checks.transport import FP8_DTYPES
from eagle3_conformance.contract import Contract
from eagle3_conformance.core import gates
from eagle3_conformance.core.capture import Capture
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.core.notation import Boundary

if TYPE_CHECKING:
    import torch

    from eagle3_conformance.reference import Reference
else:  # imported at first use: the package loads without torch (core installs)
    from eagle3_conformance.environment.torch_env import lazy_torch as torch

#: median per-row angle (degrees) above which data is not float32-produced (see the module docstring)
FLOAT32_MEDIAN_ANGLE_DEG = 0.3
#: above this median the rows are not a precision's noise at all (most rows belong elsewhere: a fault
#: the other checks name): the bf16 per-sample allowance, itself above the 5.24 deg worst bf16 noise measured
NOISE_MEDIAN_MAX_DEG = gates.IDENTITY_NOISE_DEG["bfloat16"]
PRECISION_CHECK = "production_precision"


def precision_key(stored: bool) -> str:
    """The contract key that states the production precision of stored training data or of a serving capture."""
    return "precision.training" if stored else "precision.serving"


#: the dtypes a connector may have been handed float32-computed values in (the FP8 file does not say)
FP8_HANDED_DTYPES = ("float32", "bfloat16", "float16")


def _planes(c: Contract, cap: Capture, ref: Reference) -> list[tuple[torch.Tensor, torch.Tensor, Boundary, torch.Tensor, int]]:
    """(values [R, d], token rows [R], declared boundary, kept rows [R], plane index in the file) per slot
    whose rows split as declared, the verifier plane (index K) last when the capture has it."""
    d = c.draft.target_hidden_size
    keep = keep_rows(c, cap.rows)
    pairs = [(s, cap.rows, c.aux[i], keep, i) for i, s in enumerate(cap.slots(d)) if i < c.num_slots and s.shape[-1] == d]
    if cap.verifier_last is not None and cap.verifier_last.shape[-1] == d:
        vr = verifier_rows(c, cap)
        if bool(((vr >= 0) & (vr < ref.stack.shape[1])).all()) and cap.verifier_last.shape[0] == vr.shape[0]:
            pairs.append((cap.verifier_last, vr, Boundary.parse(c.verifier_last.tensor), keep_rows(c, vr), c.num_slots))
    return pairs


def fp8_reference(c: Contract, cap: Capture, ref: Reference, handed: str) -> torch.Tensor:
    """The reference as hs-connectors' FP8 connector writes it and ``FP8Transfer`` reads it back:
    [T, N, d] float32, the N = K (+1 when the file holds the verifier plane) declared boundaries of
    every token, handed over in ``handed`` (a dtype name), quantised with one scale per token by
    ``hs_connectors.fp8_utils.quantize_tensor_to_fp8`` (with the file's own per-token scales where the
    payload provenance carries them, ``scale_values``: a scale fault is then not value noise) and dequantised to the capture's dtype by
    ``dequantize_fp8_tensor`` (fp8_utils.py:29-58; FP8HiddenStatesConnector._write_tensors,
    fp8_hidden_states_connector.py:49-56; FP8Transfer._dequantize, transfer.py:226-233)."""
    from hs_connectors.fp8_utils import dequantize_fp8_tensor, quantize_tensor_to_fp8

    from eagle3_conformance.environment.torch_env import torch_dtype

    shape = (cap.provenance.get("payload") or {}).get("shape") or []
    planes = list(c.aux) + ([Boundary.parse(c.verifier_last.tensor)] if len(shape) == 3 and shape[1] > len(c.aux) else [])
    stack = torch.stack([ref.boundary(b) for b in planes], dim=1).to(torch_dtype(handed))
    q, scale = quantize_tensor_to_fp8(stack)
    given = (cap.provenance.get("payload") or {}).get("scale_values")
    if given is not None and len(given) == stack.shape[0]:
        # the scales the file was written with (right or wrong): quantise_tensor_to_fp8's own step
        # ``(fp32 / scale).to(fp8_dtype)`` (fp8_utils.py:48-50) with the file's scale, where it is a positive number
        s = torch.tensor(given, dtype=torch.float32).reshape(-1, 1, 1)
        scale = torch.where(torch.isfinite(s) & (s > 0), s, scale)
        q = (stack.float() / scale).to(q.dtype)
    out = cap.feature.dtype if cap.feature.dtype in (torch.bfloat16, torch.float16, torch.float32) else torch.bfloat16
    return dequantize_fp8_tensor(q, scale, dtype=out).float()


def _slot_angles(c: Contract, cap: Capture, ref: Reference, fp8: Optional[torch.Tensor] = None) -> list[torch.Tensor]:
    """Per slot whose best match is its declared boundary, the angle (deg) of each kept resolvable row to
    its reference row: the float32 boundary, or with ``fp8`` ([T, N, d], :func:`fp8_reference`) the plane
    the connector would have written from it."""
    max_cos = gates.resolvable_max_cosine(c)
    out = []
    for x, rows, b, k, plane in _planes(c, cap, ref):
        if fp8 is not None and plane >= fp8.shape[1]:
            continue  # the file has no such plane (verifier_present says so)
        k = k & resolvable(ref, b, rows, max_cos)
        if not bool(k.any()) or identify(x, rows, ref, k)[0] != b:
            continue  # another boundary: a slot fault, not noise (the identity checks say which)
        want = ref.boundary(b)[rows[k]] if fp8 is None else fp8[rows[k], plane]
        cos = torch.nn.functional.cosine_similarity(x.float()[k], want, dim=-1)
        out.append(torch.rad2deg(torch.acos(cos.clamp(-1.0, 1.0))))
    return out


def _median_angle(c: Contract, cap: Capture, ref: Reference) -> tuple[Optional[float], dict]:
    """The capture's median per-row angle (None: nothing to measure) and what it was measured against."""
    p = cap.provenance.get("payload") or {}
    if p.get("dtype") not in FP8_DTYPES:
        angles = _slot_angles(c, cap, ref)
        return (float(torch.cat(angles).median()) if angles else None), {}
    best: tuple[Optional[float], dict] = (None, {})
    for handed in FP8_HANDED_DTYPES:
        angles = _slot_angles(c, cap, ref, fp8_reference(c, cap, ref, handed))
        med = float(torch.cat(angles).median()) if angles else None
        if med is not None and (best[0] is None or med < best[0]):
            best = (med, {"against": f"the reference through hs-connectors FP8 (handed over as {handed})"})
    return best


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
    if (cap.provenance.get("payload") or {}).get("dtype") in FP8_DTYPES and cap.provenance.get("transfer") != "fp8":
        return [finding(PRECISION_CHECK, "skip", cap, "feature", declared, None,
                   "FP8 payload read without FP8Transfer: production precision not judged (transfer_backend "
                   "judges it)", "K12")]
    if not usable(cap, c.draft.target_hidden_size) or cap.width != c.capture.feature_width \
            or int(cap.rows.min()) < 0 or int(cap.rows.max()) >= ref.stack.shape[1]:
        return [finding(PRECISION_CHECK, "skip", cap, "feature", declared, None, "rows do not split into the declared slots", "K12")]
    med, against = _median_angle(c, cap, ref)
    if med is None:
        return [finding(PRECISION_CHECK, "skip", cap, "feature", declared, None,
                   "no slot matches its declared boundary on a resolvable row: nothing to measure", "K12")]
    obs = {"median_row_angle_deg": round(med, 4), "declared": declared, "key": key, **against}
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
               f"{key}: float32 says (cosine {math.cos(math.radians(med)):.5f} per row"
               + (f"; against {against['against']}" if against else "") + ")", "K12", key)]
