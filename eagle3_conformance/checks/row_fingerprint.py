"""Per-row fingerprint: every row, slot by slot, is the declared boundary of the token the path claims."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eagle3_conformance.checks.common import GATE_ROW_FLOOR, finding, keep_rows, no_rows, usable
from eagle3_conformance.checks.identity import resolvable
from eagle3_conformance.checks.registry import REFERENCE, check
from eagle3_conformance.contract import Contract
from eagle3_conformance.core import gates
from eagle3_conformance.core.capture import Capture
from eagle3_conformance.core.findings import Finding

if TYPE_CHECKING:
    import torch

    from eagle3_conformance.reference import Reference
else:  # imported at first use: the package loads without torch (core installs)
    from eagle3_conformance.environment.torch_env import lazy_torch as torch


@check(REFERENCE, ("K4", "K8", "K13"), gates=(GATE_ROW_FLOOR,))
def check_row_fingerprint(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """K13: every non-excluded feature row, slot by slot, is the declared boundary of the token the
    path claims (per-row cosine >= ``gates.slot_identity_min_cosine``, by default from the serving
    dtype's measured per-token noise; docs/gates.md). Catches rows moved across requests or
    documents even when most rows are right (the mean in slot_identity can hide a few). Rows at
    which the reference cannot tell the declared boundary from another are not judged.

    Inputs: ``cap.feature`` [N, K*d], ``cap.rows`` [N] int64 into ``ref.stack`` [L+2, T, d] float32.
    """
    d = c.draft.target_hidden_size
    if not usable(cap, d) or cap.width != c.capture.feature_width:
        return [finding("row_fingerprint", "skip", cap, "feature", None, None, "widths do not split into the declared slots", "K13")]
    if int(cap.rows.min()) < 0 or int(cap.rows.max()) >= ref.stack.shape[1]:
        return [finding("row_fingerprint", "skip", cap, "feature", None, None, "row indices outside the sequence", "K13")]
    keep = keep_rows(c, cap.rows)
    if not bool(keep.any()):
        return no_rows("row_fingerprint", cap, "feature", "K13")
    gate = gates.row_min_cosine(c, cap.stored)
    worst, worst_at = 2.0, None
    bad_rows: set[int] = set()
    max_cos = gates.resolvable_max_cosine(c)
    for i, s in enumerate(cap.slots(d)):
        k = keep & resolvable(ref, c.aux[i], cap.rows, max_cos)
        if not bool(k.any()):
            continue
        r = ref.boundary(c.aux[i])[cap.rows[k]]
        cos = torch.nn.functional.cosine_similarity(s.float()[k], r, dim=-1)
        j = int(cos.argmin())
        if float(cos[j]) < worst:
            worst, worst_at = float(cos[j]), (i, int(cap.rows[k][j]))
        bad_rows |= set(cap.rows[k][cos < gate].tolist())
    if worst_at is None:
        return [finding("row_fingerprint", "skip", cap, "feature", None, None,
                        "no row at which the reference tells the declared boundaries from their neighbours "
                        "(massive-activation or repeated tokens only): cannot fingerprint", "K13")]
    ok = not bad_rows
    msg = (f"every row is its token's declared boundary (min cosine {worst:.4f})" if ok else
           f"{len(bad_rows)} rows are not the declared boundary of the token the path claims (worst: slot "
           f"{worst_at[0]} at token {worst_at[1]}, cosine {worst:.4f} < {GATE_ROW_FLOOR} {gate})")
    return [finding("row_fingerprint", "pass" if ok else "fail", cap, "feature", f"per-row cos >= {gate}",
                    f"min cos {worst:.4f}" + ("" if ok else f", rows {sorted(bad_rows)[:8]}"), msg, "K13",
                    "" if ok else GATE_ROW_FLOOR)]
