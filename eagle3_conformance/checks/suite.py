"""Every check on one capture, in registry order (:mod:`eagle3_conformance.checks.registry`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from eagle3_conformance.checks.common import finding
from eagle3_conformance.checks.registry import CAPTURE, REFERENCE, of
from eagle3_conformance.contract import Contract
from eagle3_conformance.core.capture import Capture
from eagle3_conformance.core.findings import Finding

if TYPE_CHECKING:
    from eagle3_conformance.reference import Reference


def run_checks(c: Contract, cap: Capture, ref: Optional[Reference]) -> list[Finding]:
    """All capture checks on ``cap``, then (with ``ref``, the reference forward of its tokens)
    all reference checks. A capture the path could not produce gets only the checks declared
    ``always`` (``sample_available`` says why); without a reference, fingerprint checks are
    reported as one skip."""
    out: list[Finding] = []
    for spec in of(CAPTURE):
        if spec.always or not cap.unavailable:
            out += spec.fn(c, cap)
    if cap.unavailable:
        return out
    if ref is None:
        out.append(finding("slot_identity", "skip", cap, None, None, None,
                           "no reference model: slot identity, order and alignment not checked", "K2"))
        return out
    for spec in of(REFERENCE):
        out += spec.fn(c, cap, ref)
    return out
