"""A slot that carries no hidden state at all: every row zero, or one constant (R66, issue 37).

vLLM's ``extract_hidden_states`` wrote all-zero states for hybrid (Mamba) verifiers (its KV page of 528
slots read with a block size of 22: vllm-project/vllm#46301, vllm-project/speculators#613); training
"converged" on them and serving accepted ~1-2 %. A norm band calibrated wide enough, or not
calibrated, lets such a slot through, and a fingerprint needs a reference; this check needs neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eagle3_conformance.checks.common import finding
from eagle3_conformance.checks.registry import CAPTURE, TENSORS, check
from eagle3_conformance.contract import Contract
from eagle3_conformance.core.capture import Capture
from eagle3_conformance.core.findings import Finding

if TYPE_CHECKING:
    import torch
else:  # imported at first use: the package loads without torch (core installs)
    from eagle3_conformance.environment.torch_env import lazy_torch as torch


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


CHUNK_ELEMS = 1 << 18
"""Most elements of one float32 row chunk :func:`degenerate` compares (1 MiB); the first chunk is
:data:`FIRST_ROWS` rows, each next one twice as many rows, up to this."""

FIRST_ROWS = 2
"""Rows of the first chunk: on real data two rows answer every question :func:`degenerate` asks."""


def _row_chunks(n: int, d: int):
    """``(a, b)`` row ranges covering ``0..n``: :data:`FIRST_ROWS` rows, then doubling, each at most
    :data:`CHUNK_ELEMS` elements (at least one row)."""
    a, rows, most = 0, FIRST_ROWS, max(1, CHUNK_ELEMS // max(d, 1))
    while a < n:
        b = min(n, a + min(rows, most))
        yield a, b
        a, rows = b, rows * 2


def _repeat_counts(n: int, token_ids: torch.Tensor | None) -> bool:
    """Whether rows that are all one vector would be degenerate: two or more rows over tokens that are
    not all one id (unknown ids count as different)."""
    if n < 2:
        return False
    ids = token_ids.flatten() if token_ids is not None else None
    return ids is None or ids.numel() < 2 or bool((ids != ids[0]).any())


def degenerate(x: torch.Tensor, token_ids: torch.Tensor | None = None) -> str | None:
    """Why the rows ``x`` [n, d] (any float dtype, e.g. a memory-mapped bfloat16 view) carry no hidden
    state, or None when they do.

    ``"all rows zero"``; ``"every row constant"`` (one value across the hidden dimension, e.g. a fill);
    ``"one row repeated"``: every row the same vector over tokens with at least two distinct ids (rows of
    one repeated token may be equal: the embedding B_0 of "a a a"). A block holding NaN or Inf is None
    (the finite check names it). Exact comparisons, of the values in float32: a real hidden state is never
    exactly any of these, in any dtype.

    Reads row chunks (:func:`_row_chunks`, at most :data:`CHUNK_ELEMS` float32 elements converted at a
    time, never the whole block) and stops at the first chunk that answers all three questions: one
    non-zero row, one row that is not one value, one row unlike row 0. On real data that is the first two
    rows, O(d); only a block that is degenerate (or one token repeated) is read to its end."""
    if x.dim() != 2 or not x.shape[0] or not x.shape[1]:
        return None
    n, d = x.shape
    row0 = x[0].float()
    nonzero, varies, differs = False, d < 2, not _repeat_counts(n, token_ids)
    for a, b in _row_chunks(n, d):
        xf = x[a:b].float()
        nonzero = nonzero or bool(xf.any())  # NaN and Inf are non-zero
        varies = varies or bool((xf != xf[:, :1]).any())  # NaN != NaN: a NaN row varies
        differs = differs or bool((xf != row0).any())
        if nonzero and varies and differs:
            return None
    # degenerate as far as the comparisons see; the block is finite iff what they compared is
    if not nonzero:
        return "all rows zero"
    if not varies:  # every row is its first value
        return "every row constant" if bool(torch.isfinite(x[:, 0].float()).all()) else None
    # every row equals row 0 (and ids differ)
    return "one row repeated" if bool(torch.isfinite(row0).all()) else None


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
