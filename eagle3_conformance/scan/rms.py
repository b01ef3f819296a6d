"""The all-rows reduction: per-row per-slot RMS of stored hidden states, read once, and the
contract as the checks see those RMS columns."""

from __future__ import annotations

import math
from typing import Optional

import torch

from eagle3_conformance.contract import Contract
from eagle3_conformance.scan.options import BLOCK_ELEMS

EXACT_NEAR_REL = 2.0 ** -7
"""bfloat16 fast path: rows whose RMS lies within this relative distance of a given edge (a band
limit) are recomputed exactly in float32, so verdicts equal the float32 reduction's."""


def slot_rms(hs: torch.Tensor, block_elems: int = BLOCK_ELEMS, buf: Optional[torch.Tensor] = None,
             exact_near: Optional[list[list[float]]] = None) -> torch.Tensor:
    """Per-row per-slot RMS of stored hidden states, read once.

    bfloat16 data is reduced directly by torch's norm kernel (float accumulation, the RMS rounded
    to bfloat16: relative error <= 2**-8); other dtypes are converted in float32 row blocks.

    Args:
        hs: [T, N, H] tensor of any float dtype (bf16, fp16, fp32, fp8); typically a
            memory-mapped view, read once.
        block_elems: elements per float32 block (memory used is 4 bytes x this).
        buf: optional reusable float32 scratch of at least one block ([B, N, H]).
        exact_near: per slot, values (RMS units, e.g. a norm band's lo and hi) near which the
            result must be exact: bfloat16 rows within :data:`EXACT_NEAR_REL` of one are
            recomputed in float32, so a comparison with those values is decided as the float32
            reduction decides it.

    Returns:
        [T, N] float32: ``sqrt(mean(x**2))`` over H for each row and slot (for bfloat16 data
        within a relative 2**-8 of the exact value); NaN or Inf exactly
        where the row/slot holds a NaN or Inf (finite rows that overflow float32 are recomputed
        in float64).
    """
    T, N, H = hs.shape
    out = torch.empty(T, N, dtype=torch.float32)
    if T == 0:
        return out
    if H == 0:
        return out.zero_()
    if hs.dtype == torch.bfloat16:
        # torch's CPU norm kernel reads the bf16 data once and accumulates in float (the opmath
        # type of bfloat16); only the result is rounded to bfloat16: relative error <= 2**-8, the
        # data's own precision (tests/test_scan.py compares with a float64 sum). About 2.5x faster
        # than converting row blocks to float32 first (12 vs 5 GB/s on one core of the 2-core VM).
        out = torch.linalg.vector_norm(hs, dim=-1).float().mul_(1.0 / math.sqrt(H))
        for k, edges in enumerate((exact_near or [])[:N]):
            if not edges:
                continue
            e = torch.tensor([float(v) for v in edges], dtype=torch.float32)
            near = ((out[:, k, None] - e).abs() <= EXACT_NEAR_REL * e.abs()).any(-1).nonzero().flatten()
            if near.numel():
                out[near, k] = torch.linalg.vector_norm(hs[near, k].float(), dim=-1).mul_(1.0 / math.sqrt(H))
        return _overflow_rows(hs, out)
    rows = max(1, block_elems // max(N * H, 1))
    scratch: Optional[torch.Tensor] = None  # float32 blocks of a non-float32 ``hs``
    if hs.dtype != torch.float32:
        fits = buf is not None and buf.shape[0] >= min(rows, T) and buf.shape[1:] == (N, H)
        scratch = buf if fits else torch.empty(min(rows, T), N, H, dtype=torch.float32)
    for a in range(0, T, rows):
        b = min(a + rows, T)
        x = hs[a:b]
        if scratch is not None:
            xf = scratch[: b - a]
            xf.copy_(x)
            x = xf
        torch.linalg.vector_norm(x, dim=-1, out=out[a:b])
    out.mul_(1.0 / math.sqrt(H))
    return _overflow_rows(hs, out)


def _overflow_rows(hs: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out`` with its non-finite entries recomputed in float64 where the row itself is finite
    (float32 overflow of the sum of squares); NaN/Inf rows stay non-finite."""
    bad = (~torch.isfinite(out)).nonzero()
    for t, k in bad.tolist():  # rare: NaN/Inf rows, or float32 overflow of the sum of squares
        x = hs[t, k]
        if bool(torch.isfinite(x).all()):
            out[t, k] = float(x.double().pow(2).mean().sqrt())
    return out


def reduced_contract(c: Contract) -> Contract:
    """The contract as seen by checks run on per-row RMS columns: each slot is 1 wide."""
    return c.model_copy(update={"draft": c.draft.model_copy(update={"target_hidden_size": 1})})


def band_edges(c: Contract, n: int, verifier: bool = True) -> Optional[list[list[float]]]:
    """Per stored slot (aux slots, then the verifier when ``verifier``), the RMS values a norm-band
    verdict turns on: the band's lo and hi and the massive-activation cut
    (:func:`eagle3_conformance.checks.band_rows`)."""
    if c.norm_bands.status != "calibrated":
        return None
    ratio = c.norm_bands.massive_activation_ratio
    out: list[list[float]] = []
    for k in range(n):
        b = c.verifier_last.parsed if verifier and k == n - 1 else (c.aux[k] if k < c.num_slots else None)
        band = c.band_for(b) if b is not None else None
        if band is None:
            out.append([])
            continue
        edges = [band.lo, band.hi]
        if ratio and band.lo > 0:
            edges.append(ratio * (band.lo * band.hi) ** 0.5)
        out.append(edges)
    return out
