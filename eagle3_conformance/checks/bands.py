"""Norm bands: each slot's per-token RMS inside the contract's calibrated band."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eagle3_conformance import reference
from eagle3_conformance.checks.common import finding, slot_label, verifier_rows
from eagle3_conformance.checks.registry import CAPTURE, SLOT_RMS, check
from eagle3_conformance.contract import Contract
from eagle3_conformance.core.capture import Capture
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.core.notation import Boundary

if TYPE_CHECKING:
    import torch
else:  # imported at first use: the package loads without torch (core installs)
    from eagle3_conformance.environment.torch_env import lazy_torch as torch


def band_rows(c: Contract, rows: torch.Tensor, x: torch.Tensor, band=None) -> torch.Tensor:
    """Mask of rows that are banded: not an excluded position, not a massive activation.

    A massive activation is a row whose RMS exceeds ``massive_activation_ratio`` times a typical
    RMS: the calibrated band's geometric centre when ``band`` is given (so a one-row decode
    capture is judged against the calibration data, not against itself), else the capture's own
    median (calibration, where no band exists yet)."""
    keep = ~torch.isin(rows, torch.tensor(sorted(set(c.norm_bands.exclude_positions)), dtype=torch.long))
    ratio = c.norm_bands.massive_activation_ratio
    if ratio and bool(keep.any()):
        r = reference.rms(x)
        med = (band.lo * band.hi) ** 0.5 if band is not None and band.lo > 0 else r[keep].median()
        keep &= r <= ratio * med
    return keep


@check(CAPTURE, ("K4", "K12", "K2"), emits=("norm_band",), stored=SLOT_RMS, rowless=True)
def check_norm_bands(c: Contract, cap: Capture) -> list[Finding]:
    """K4/K12 (and K2 where scales differ): per-slot per-token RMS within the contract's band.
    Uncalibrated bands are reported as skip with observed "uncalibrated", never as pass."""
    if c.norm_bands.status != "calibrated":
        return [finding("norm_band", "skip", cap, None, "calibrated bands", "uncalibrated",
                        "norm bands are uncalibrated: magnitudes are not checked", "K4")]
    d = c.draft.target_hidden_size
    out = []
    named = list(enumerate(cap.slots(d)))
    targets: list[tuple[str, Boundary, torch.Tensor, torch.Tensor]] = [
        (slot_label(i), c.aux[i], s, cap.rows) for i, s in named if i < c.num_slots and s.shape[-1] == d
    ]
    if cap.verifier_last is not None:
        targets.append(("verifier", c.verifier_last.parsed, cap.verifier_last, verifier_rows(c, cap)))
    for label, b, x, rows in targets:
        band = c.band_for(b)
        if band is None or not x.shape[0]:
            continue
        if x.shape[0] != rows.shape[0]:  # malformed capture: row_count reports it
            out.append(finding("norm_band", "skip", cap, label, [band.lo, band.hi], None,
                               f"{x.shape[0]} rows but {rows.shape[0]} row indices: cannot band", "K4"))
            continue
        keep = band_rows(c, rows, x, band)
        if not bool(keep.any()):
            out.append(finding("norm_band", "skip", cap, label, [band.lo, band.hi], None, "every row is excluded", "K4"))
            continue
        r = reference.rms(x[keep])
        lo, hi = float(r.min()), float(r.max())
        outside = ((r < band.lo) | (r > band.hi)).sum().item()
        ok = outside == 0
        out.append(finding("norm_band", "pass" if ok else "fail", cap, label, [band.lo, band.hi], [lo, hi],
                           f"{label} ({b}) per-token RMS in [{lo:.4g}, {hi:.4g}]"
                           + ("" if ok else f": {outside} rows outside the band [{band.lo:.4g}, {band.hi:.4g}]"),
                           "K4"))
    return out
