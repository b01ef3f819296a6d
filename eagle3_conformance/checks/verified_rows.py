"""After a partially accepted verify: the rows the draft extend receives for the accepted tokens are
those tokens' own verify rows, not padding and not rows of other tokens or requests (fault-kinds.md
field reports R43, R52)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from eagle3_conformance.checks.common import GATE_ROW_FLOOR, finding, usable
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


def _row_matches(c: Contract, cap: Capture, ref: Reference, n: int) -> list[tuple[int, float, int, float]]:
    """For each of the first ``n`` feature rows: (own token index, its score against its own token,
    best-matching token index, its score). The score of token t is the smallest, over the slots, of
    the cosine between the row's slot and the declared boundary at t (a row is token t's only if
    every slot is). A zero row gets best index -1."""
    d = c.draft.target_hidden_size
    refs = [ref.boundary(b).float() for b in c.aux]  # K x [T, d]
    out = []
    for j in range(n):
        x = cap.feature[j].float()
        own = int(cap.rows[j])
        if not bool(x.abs().max() > 0):
            out.append((own, 0.0, -1, 0.0))
            continue
        score = torch.stack([torch.nn.functional.cosine_similarity(x[None, i * d:(i + 1) * d], r, dim=-1)
                             for i, r in enumerate(refs)]).min(dim=0).values  # [T]
        best = int(score.argmax())
        out.append((own, float(score[own]), best, float(score[best])))
    return out


@check(REFERENCE, ("K9", "K13"), gates=(GATE_ROW_FLOOR,))
def check_verified_rows(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """R43 / R52 (fault-kinds.md field reports; K13 + K9): on the draft extend after a target verify,
    each of the first ``accepted`` rows (``cap.provenance["accepted"]``, the accept length with the
    bonus token) is its own token's verify row: not a zero padding row (vllm-ascend#8433: padded,
    unindexed aux rows) and not another token's or request's verified row (ik_llama.cpp#1894: the
    wrong verified rows after partial acceptance). A row is another token's when it is below
    ``gates.slot_identity_min_cosine`` to its own token's declared boundaries and above it to
    another token's. Rows that match no token of the request are counted (``foreign``: another
    request's row, or not the declared boundaries at all: ``slot_identity`` / ``row_fingerprint``
    judge those) but do not fail this check, so that a wrong-boundary fault is not read as a row
    fault; a row below the floor that still matches its own token best is precision noise, not
    judged here either.

    Inputs: ``cap.feature`` [N, K*d], ``cap.rows`` [N] int64 token indices into the reference of
    ``cap.token_ids`` (``ref.boundary(b)`` [T, d] float32). Only captures with an ``accepted``
    count (SGLang's verify path) are judged; others give no finding.

    The finding's ``observed`` is ``{"accepted", "padding", "shifted", "foreign", "shift"}``:
    counts of accepted rows that are zero rows, rows of another token of this request (``shift``:
    the most common offset best - own), and rows matching no token of this request above the floor.
    """
    acc = cap.provenance.get("accepted")
    if acc is None:
        return []
    d = c.draft.target_hidden_size
    if not usable(cap, d) or cap.width != c.capture.feature_width:
        return [finding("verified_rows", "skip", cap, "feature", None, None,
                        "widths do not split into the declared slots", "K13")]
    n = min(int(acc), cap.feature.shape[0])
    if n < 1 or int(cap.rows[:n].max()) >= ref.stack.shape[1]:
        return [finding("verified_rows", "skip", cap, "feature", None, None, "no accepted row to judge", "K13")]
    gate = gates.row_min_cosine(c, cap.stored)
    pad, shifted, foreign, shifts, worst = 0, 0, 0, [], []
    for j, (own, own_cos, best, best_cos) in enumerate(_row_matches(c, cap, ref, n)):
        if best < 0:
            pad += 1
            worst.append(f"row {j}: zeros (padding)")
        elif own_cos < gate and best != own:
            if best_cos >= gate:
                shifted += 1
                shifts.append(best - own)
                worst.append(f"row {j}: token {best}'s row, not token {own}'s (cos {own_cos:.3f} to its own)")
            else:
                foreign += 1
                worst.append(f"row {j}: no row of this request (best cos {best_cos:.3f}, token {best})")
    want = f"accepted rows {n}: their own verify rows {int(cap.rows[0])}..{int(cap.rows[n - 1])}"
    obs = {"accepted": n, "padding": pad, "shifted": shifted, "foreign": foreign,
           "shift": Counter(shifts).most_common(1)[0][0] if shifts else None}
    ok = not (pad or shifted)
    msg = (f"no accepted row of the {n} is padding or another token's verify row" if ok else
           f"{pad + shifted} of the {n} accepted rows are not their own verify rows: " + "; ".join(worst[:3]))
    if foreign:
        msg += f" ({foreign} match no row of this request: not judged here)"
    return [finding("verified_rows", "pass" if ok else "fail", cap, "feature", want, obs, msg, "K13",
                    "" if ok or pad else GATE_ROW_FLOOR)]
