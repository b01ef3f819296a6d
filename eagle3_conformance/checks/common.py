"""What the checks share: the finding of a capture, the contract keys (gates) findings name,
slot labels, the verifier's token rows and the rows a fingerprint may use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eagle3_conformance.contract import Contract
from eagle3_conformance.core.capture import Capture
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.environment.torch_env import dtype_name  # noqa: F401  (the checks' import of it)

if TYPE_CHECKING:
    import torch
else:  # imported at first use: the package loads without torch (core installs)
    from eagle3_conformance.environment.torch_env import lazy_torch as torch


def finding(check, status, cap: Capture, slot, expected, observed, message, fault, gate: str = "") -> Finding:
    return Finding(check, status, cap.path, slot, expected, observed, cap.where, message, fault, gate)


#: contract keys of the identity gates (docs/gates.md), named in findings they decide
GATE_NOISE = "gates.identity_noise_deg"
GATE_ROW_FLOOR = "gates.slot_identity_min_cosine"
GATE_CROSS_PATH = "gates.cross_path_min_cosine"


#: below this best cosine a slot is reported as matching no boundary rather than as "being" the
#: nearest one (a wrong reference model or a tensor that is not a boundary at all)
NO_MATCH_COSINE = 0.5


def slot_label(i: int) -> str:
    return f"slot {i}"


def verifier_rows(c: Contract, cap: Capture) -> torch.Tensor:
    """Token index of each verifier row: ``rows + alignment.target`` for a shifted batch (the
    contract's pairing), ``rows + cap.verifier_offset`` where the path says otherwise."""
    off = c.alignment.target if cap.verifier_offset is None else cap.verifier_offset
    return cap.rows + off


def keep_rows(c: Contract, cap_rows: torch.Tensor) -> torch.Tensor:
    """Mask over capture rows that are not excluded positions (``norm_bands.exclude_positions``:
    position 0 carries massive activations that make every boundary look alike)."""
    excl = torch.tensor(sorted(set(c.norm_bands.exclude_positions)), dtype=torch.long)
    return ~torch.isin(cap_rows, excl) if excl.numel() else torch.ones_like(cap_rows, dtype=torch.bool)


def no_rows(check: str, cap: Capture, slot, fault: str) -> list[Finding]:
    return [finding(check, "skip", cap, slot, None, None,
                    "every row is at an excluded position (e.g. only the start token): cannot fingerprint", fault)]


def usable(cap: Capture, d: int) -> bool:
    return cap.feature.shape[0] > 0 and cap.rows.shape[0] == cap.feature.shape[0]

