"""The numbers behind the identity and agreement gates, resolved for one contract.

A contract's ``gates`` block leaves these null by default; they are then derived from the
precision the judged hidden states were *produced* in: ``precision.training`` for stored training
data (``Capture.stored``), ``precision.serving`` for a serving capture, each ``target.dtype``
(the checkpoint's) when null (:meth:`eagle3_conformance.contract.Contract.produced_dtype`). A float32
checkpoint served with an engine's ``dtype="auto"`` produces half-precision data, whose noise the
float32 gates would call a fault (issue 23). The defaults come from measurements on two
trained targets of different families (SmolLM2-135M-Instruct, a Llama; Gemma-3-270M held out),
float32 reference vs a bfloat16 forward (bf16 operands, fp32 accumulation, as a GPU server
computes), over the project's corpus: ``benchmarks/bench_identity_gates.py`` reproduces them and
docs/gates.md writes the derivation down. Nothing here was tuned on the synthetic fixtures.

The rule (docs/gates.md):

1. A token is *resolvable* for a declared boundary B_k when, in the reference itself, no other
   boundary has cosine >= ``resolvable_max_cosine`` with B_k at that token. Massive-activation
   tokens (every mid boundary points one way) and runs of repeated tokens are excluded and
   counted, never failed. The exclusion is judged on the reference's own per-token profile, so
   it works on a one-row decode capture.
2. Per sample, a slot is identified by *rank*: the boundary with the highest mean per-token
   cosine over the resolvable tokens. Declared = best: pass. Otherwise it fails only when the
   declared boundary is farther than the best one by more than ``identity_noise_deg`` (angles of
   the mean cosines); within that allowance the sample is undecidable (skip, counted).
3. Per row (``row_fingerprint``), every resolvable row's cosine to its declared boundary must reach
   ``slot_identity_min_cosine``.
"""

from __future__ import annotations

import math

#: per-sample noise allowance (degrees) by serving dtype, at least the worst per-sample angle
#: between a correct slot and its reference boundary measured over 996 corpus windows per model
#: (docs/gates.md): 0.17 deg for float32 data stored as bf16, 5.24 deg for a bf16 forward
#: (SmolLM2, one-token windows). By the triangle inequality a correct slot can look closer to
#: another boundary only by less than its own noise angle, so no allowance below that is safe.
IDENTITY_NOISE_DEG = {"float32": 1.0, "bfloat16": 6.0, "float16": 6.0}
#: per-row floor by serving dtype (worst single-token bf16 cosine measured 0.934 on SmolLM2)
ROW_MIN_COSINE = {"float32": 0.99, "bfloat16": 0.85, "float16": 0.85}
#: two paths over the same tokens, per row and slot
CROSS_PATH_MIN_COSINE = {"float32": 0.999, "bfloat16": 0.98, "float16": 0.98}
#: a token whose declared boundary has this cosine with another is not resolvable
RESOLVABLE_MAX_COSINE = 0.999
#: magnitude check (checks.check_magnitude): the median per-token rms(slot)/rms(reference) must lie
#: in [1/r, r]. float32 serving: bf16 storage moves it by < 1%, so 1.1. A bf16 forward: the
#: per-path benchmark (docs/gates.md) measured 0.463 (2.16x off) on a one-row bf16 decode capture,
#: so 3.0; the faults the check exists for sit far outside either (a slot normalized without its
#: weights has RMS ~1 against 10-40 at SmolLM2's mid depths; FP8 read without its scales is off by
#: the scale factor).
MAGNITUDE_MAX_RATIO = {"float32": 1.1, "bfloat16": 3.0, "float16": 3.0}
#: fp8_scale_error (checks.check_fp8_scale_error): per-token per-slot relative error of the training
#: data against the float32 reference. hs-connectors' FP8 (e4m3, 3 mantissa bits, one scale per token)
#: on SmolLM2-135M's corpus (benchmarks/bench_fp8_transport.py, docs/gates.md "FP8 transport"): worst
#: correct token 0.050 with a float32 forward (median 0.026), 0.274 with a bfloat16 forward (its own
#: noise); the default is 2x the worst correct case. One value of B_L at 300x / 1000x the token's amax
#: raises B_4's error to 0.13 / 0.35 (46% / 87% of its values flushed to zero).
FP8_MAX_RELATIVE_ERROR = {"float32": 0.10, "bfloat16": 0.55, "float16": 0.55}


_ORDER = ("float32", "bfloat16", "float16")


def precision(c, stored: bool = False) -> str:
    """The precision the gates follow for stored training data (``stored``) or a serving capture, as
    a key of the tables above."""
    d = c.produced_dtype(stored)
    return d if d in IDENTITY_NOISE_DEG else "bfloat16"


def lower_precision(c, *stored: bool) -> str:
    """The lower of the precisions of captures of these kinds (a comparison is as noisy as its noisier side)."""
    return max((precision(c, s) for s in stored), key=lambda d: IDENTITY_NOISE_DEG[d])


def identity_noise_deg(c, stored: bool = False) -> float:
    """Per-sample noise allowance in degrees (``gates.identity_noise_deg`` or the precision's default)."""
    g = c.gates.identity_noise_deg
    return float(g) if g is not None else IDENTITY_NOISE_DEG[precision(c, stored)]


def row_min_cosine(c, stored: bool = False) -> float:
    """Per-row cosine floor (``gates.slot_identity_min_cosine`` or the precision's default)."""
    g = c.gates.slot_identity_min_cosine
    return float(g) if g is not None else ROW_MIN_COSINE[precision(c, stored)]


def cross_path_min_cosine(c, *stored: bool) -> float:
    """Cross-path per-row cosine floor (``gates.cross_path_min_cosine`` or the default of the lower
    precision of the two captures' kinds; none given: serving)."""
    g = c.gates.cross_path_min_cosine
    return float(g) if g is not None else CROSS_PATH_MIN_COSINE[lower_precision(c, *(stored or (False,)))]


def resolvable_max_cosine(c) -> float:
    g = c.gates.resolvable_max_cosine
    return float(g) if g is not None else RESOLVABLE_MAX_COSINE


def magnitude_max_ratio(c, stored: bool = False) -> float:
    """Magnitude band factor by the capture's precision (no contract key: the faults it exists for are
    an order of magnitude outside it)."""
    return MAGNITUDE_MAX_RATIO[precision(c, stored)]


def fp8_max_relative_error(c, stored: bool = True) -> float:
    """Per-token relative error tolerance of the training data (``gates.fp8_max_relative_error``
    or the default :data:`FP8_MAX_RELATIVE_ERROR` of the precision the data was produced in)."""
    g = c.gates.fp8_max_relative_error
    return float(g) if g is not None else FP8_MAX_RELATIVE_ERROR[precision(c, stored)]


def angle_deg(cos: float) -> float:
    """arccos in degrees, clamped to [-1, 1]."""
    return math.degrees(math.acos(max(-1.0, min(1.0, cos))))
