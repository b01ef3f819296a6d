"""Per-tensor dtypes declared in ``contract.dtypes``."""

from __future__ import annotations

from eagle3_conformance.checks.common import dtype_name, finding
from eagle3_conformance.checks.registry import CAPTURE, DTYPES, check
from eagle3_conformance.contract import Contract
from eagle3_conformance.core.capture import Capture
from eagle3_conformance.core.findings import Finding


@check(CAPTURE, ("K12",), emits=("tensor_dtype",), stored=DTYPES)
def check_tensor_dtypes(c: Contract, cap: Capture) -> list[Finding]:
    """K12: per-tensor dtypes declared in ``contract.dtypes`` (hidden, input ids, positions).

    ``dtypes.hidden`` null defers to :func:`check_dtype` (data_dtype / target.dtype)."""
    out = []
    want_h = c.dtypes.hidden
    if want_h is not None:
        got = dtype_name(cap.feature)
        out.append(finding("tensor_dtype", "pass" if got == want_h else "fail", cap, "feature", want_h, got,
                           f"feature dtype is {got}; contract dtypes.hidden says {want_h}", "K12"))
    for name, want in (("draft_input_ids", c.dtypes.input_ids), ("position_ids", c.dtypes.positions)):
        t = getattr(cap, name)
        if t is None:
            continue
        got = dtype_name(t)
        out.append(finding("tensor_dtype", "pass" if got == want else "fail", cap, name, want, got,
                           f"{name} dtype is {got}; contract says {want}", "K12"))
    return out
