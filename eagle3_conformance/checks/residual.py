"""``residual_missing``: a slot that is no boundary but the layer's *update*: the captured tensor plus
the preceding boundary is the declared one (x + B_{k-1} = B_k).

Why: a capture site after a decoder layer's MLP but before the residual add stores the update
B_k - B_{k-1} instead of the residual stream B_k (vllm-project/vllm#14464; SGLang 0.5.23's Gemma 3
capture, fault-kinds.md). The identity checks see a tensor that matches no boundary, which on every slot at
once looks like another checkpoint as reference; this check names it from the reference itself:
mean per-row cosine of ``x`` with the update ``B_k - B_{k-1}`` at the capture's row floor, and closer to
it than to ``B_k``
(:func:`eagle3_conformance.core.gates.row_min_cosine`). It judges only a slot that is not its declared
boundary (another best match, or below the row floor: a slot that is B_k is the residual stream), so it
returns nothing on correct data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eagle3_conformance.checks.common import finding, keep_rows, usable, verifier_rows
from eagle3_conformance.checks.identity import identify
from eagle3_conformance.checks.registry import REFERENCE, check
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

RESIDUAL_CHECK = "residual_missing"


def _update_fit(x: torch.Tensor, rows: torch.Tensor, ref: Reference, b: Boundary, keep: torch.Tensor) -> tuple[float, float]:
    """Mean per-row cosine of ``x`` with the layer's update ``B_k - B_{k-1}`` and with ``B_k`` itself, over
    ``keep`` rows (k = ``b.index`` >= 1). x + B_{k-1} = B_k exactly when x is that update; the sum alone is
    no test (adjacent boundaries point alike, so B_k + B_{k-1} is close to B_k too: a false positive on a
    noisy one-row bf16 capture in bench_paths_fp), the update itself is."""
    prev, cur = ref.boundary(Boundary(b.index - 1))[rows[keep]], ref.boundary(b)[rows[keep]]
    xs = x.float()[keep]
    to_update = float(torch.nn.functional.cosine_similarity(xs, cur - prev, dim=-1).mean())
    return to_update, float(torch.nn.functional.cosine_similarity(xs, cur, dim=-1).mean())


@check(REFERENCE, ("K4",))
def check_residual_missing(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """Each aux slot (and the verifier, when it is declared B_L) that does not match its declared B_k
    but whose sum with B_{k-1} does: fail naming the slot. Inputs as
    :func:`eagle3_conformance.checks.check_row_fingerprint`. Nothing for slots that match."""
    d = c.draft.target_hidden_size
    if not usable(cap, d) or cap.width != c.capture.feature_width:
        return []
    if int(cap.rows.min()) < 0 or int(cap.rows.max()) >= ref.stack.shape[1]:
        return []
    pairs = [(f"slot {i}", s, cap.rows, c.aux[i]) for i, s in enumerate(cap.slots(d))]
    v = c.verifier_last.parsed
    if cap.verifier_last is not None and not v.final and cap.verifier_last.shape[0] == cap.rows.shape[0]:
        vr = verifier_rows(c, cap)
        if bool((vr < ref.stack.shape[1]).all()):
            pairs.append(("verifier", cap.verifier_last, vr, v))
    floor = gates.row_min_cosine(c, cap.stored)
    out = []
    for label, x, rows, b in pairs:
        keep = keep_rows(c, rows)
        if b.final or b.index < 1 or not bool(keep.any()):
            continue
        best, own = identify(x, rows, ref, keep)[:2]
        if best == b and own >= floor:
            continue  # the residual stream itself
        cos, to_b = _update_fit(x, rows, ref, b, keep)
        if cos >= floor and cos > to_b:
            out.append(finding(RESIDUAL_CHECK, "fail", cap, label, str(b), f"{b} - B_{b.index - 1}",
                          f"{label} is no boundary, but {label} + B_{b.index - 1} is {b} (mean cosine {cos:.4f}): "
                          f"the layer's update captured without the residual it is added to", "K4"))
    return out
