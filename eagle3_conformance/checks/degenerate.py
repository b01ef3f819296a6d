"""A slot that carries no hidden state at all: every row zero, or one constant (R66, issue 37).

vLLM's ``extract_hidden_states`` wrote all-zero states for hybrid (Mamba) verifiers (its KV page of 528
slots read with a block size of 22: vllm-project/vllm#46301, vllm-project/speculators#613); training
"converged" on them and serving accepted ~1-2 %. A norm band calibrated wide enough, or not
calibrated, lets such a slot through, and a fingerprint needs a reference; this check needs neither.
"""

from __future__ import annotations

import torch

from eagle3_conformance.checks.common import finding
from eagle3_conformance.checks.registry import CAPTURE, TENSORS, check
from eagle3_conformance.contract import Contract
from eagle3_conformance.core.capture import Capture
from eagle3_conformance.core.findings import Finding


def _blocks(c: Contract, cap: Capture) -> list[tuple[str, str, torch.Tensor]]:
    """(label, declared boundary, rows [n, d]) per aux slot of the feature, then the verifier."""
    d = c.draft.target_hidden_size
    out = []
    if d and cap.feature.dim() == 2 and cap.feature.shape[-1] % d == 0:
        for j, s in enumerate(torch.split(cap.feature, d, dim=-1)):
            out.append((f"slot {j}", str(c.aux[j]) if j < len(c.aux) else "?", s))
    v = cap.verifier_last
    if v is not None and v.dim() == 2 and v.shape[-1] == c.target.hidden_size:
        out.append(("verifier", c.verifier_last.tensor, v))
    return out


def degenerate(x: torch.Tensor, token_ids: torch.Tensor | None = None) -> str | None:
    """Why the rows ``x`` [n, d] carry no hidden state, or None when they do.

    ``"all rows zero"``; ``"every row constant"`` (one value across the hidden dimension, e.g. a fill);
    ``"one row repeated"``: every row the same vector over tokens with at least two distinct ids (rows of
    one repeated token may be equal: the embedding B_0 of "a a a"). Exact comparisons: a real hidden
    state is never exactly any of these, in any dtype."""
    if x.dim() != 2 or not x.shape[0] or not x.shape[1]:
        return None
    x = x.float()
    if not bool(torch.isfinite(x).all()):
        return None  # the finite check names NaN / Inf
    if not bool(x.any()):
        return "all rows zero"
    if x.shape[1] > 1 and bool((x == x[:, :1]).all()):
        return "every row constant"
    if x.shape[0] > 1 and bool((x == x[:1]).all()):
        ids = token_ids.flatten() if token_ids is not None else None
        if ids is None or ids.numel() < 2 or int(ids.unique().numel()) > 1:
            return "one row repeated"
    return None


@check(CAPTURE, ("K7", "K8", "K13"), stored=TENSORS)
def check_slot_degenerate(c: Contract, cap: Capture) -> list[Finding]:
    """R66 (K7/K8/K13): every aux slot and the verifier carry a hidden state: not every row zero, not
    every row one constant, not one row repeated over different tokens. Fails on every path whatever the
    norm band (a band can be calibrated to include 0, or not calibrated). Per slot, one finding."""
    rows = cap.rows if cap.rows is not None and cap.rows.numel() == cap.feature.shape[0] else None
    ids = None
    if rows is not None and cap.token_ids is not None and rows.numel() and int(rows.max()) < cap.token_ids.numel() \
            and int(rows.min()) >= 0:
        ids = cap.token_ids.flatten()[rows]
    out = []
    for label, declared, x in _blocks(c, cap):
        why = degenerate(x, ids)
        out.append(finding("slot_degenerate", "fail" if why else "pass", cap, label, f"{declared}: a hidden state",
                           why or "varies", f"{label} ({declared}): {why} over {int(x.shape[0])} rows: no hidden state "
                           "was written (vllm#46301: all-zero states from a hybrid verifier's KV page)" if why else
                           f"{label} carries varying values", "K7"))
    return out
