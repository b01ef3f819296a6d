"""Token alignment: feature and verifier rows at the tokens the path says (fingerprint shift
search), draft input ids, loss mask and position ids paired with row t at the contract's offsets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from eagle3_conformance.checks.common import GATE_NOISE, finding, keep_rows
from eagle3_conformance.checks.registry import CAPTURE, REFERENCE, TENSORS, check
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


def _best_offset(slot: torch.Tensor, rows: torch.Tensor, ref_b: torch.Tensor, keep: torch.Tensor, max_cos: float,
                 offsets=(-1, 0, 1, 2)) -> tuple[Optional[int], dict]:
    """Mean cosine of ``slot`` rows ([N, d]) with ``ref_b`` ([T, d]) at ``rows + o`` for each offset,
    over the rows that are kept and time-resolvable: rows where the reference's states at the
    candidate positions are not near-identical (repeated tokens make a shift invisible)."""
    T = ref_b.shape[0]
    cand = torch.stack([(rows + o).clamp(0, T - 1) for o in offsets])  # [O, N]
    inside = torch.stack([((rows + o) >= 0) & ((rows + o) < T) for o in offsets]).all(0)
    st = ref_b[cand]  # [O, N, d]
    ok = keep & inside
    for i in range(len(offsets)):
        for j in range(i + 1, len(offsets)):
            ok &= torch.nn.functional.cosine_similarity(st[i], st[j], dim=-1) < max_cos
    if not bool(ok.any()):
        return None, {}
    x = slot.float()[ok]
    scores = {o: float(torch.nn.functional.cosine_similarity(x, st[i][ok], dim=-1).mean()) for i, o in enumerate(offsets)}
    return max(scores, key=scores.__getitem__), scores


def _alignment(check: str, c: Contract, cap: Capture, label: str, x: torch.Tensor, b: Boundary, ref: Reference,
               declared: int, what: str, fault: str = "K13") -> list[Finding]:
    """Shared by feature and target alignment: the offset at which ``x`` ([N, d]) best matches the
    reference boundary ``b``, judged with the precision-noise allowance (docs/gates.md)."""
    keep = keep_rows(c, cap.rows)
    ref_b = ref.boundary(b)
    o, scores = _best_offset(x, cap.rows, ref_b, keep, gates.resolvable_max_cosine(c))
    if o is None:
        return [finding(check, "skip", cap, label, declared, None,
                        "no row whose neighbouring tokens the reference tells apart (repeated or excluded tokens): "
                        "a shift cannot be seen", fault)]
    if scores[o] < gates.row_min_cosine(c, cap.stored):
        return [finding(check, "skip", cap, label, declared, None,
                        f"{label} is not {b} at any offset (best cos {scores[o]:.4f}): it holds another tensor, so its "
                        "alignment cannot be judged (the identity checks report what it is)", fault)]
    if o != declared and declared in scores:
        gap = gates.angle_deg(scores[declared]) - gates.angle_deg(scores[o])
        if gap <= gates.identity_noise_deg(c, cap.stored):
            return [finding(check, "skip", cap, label, declared, f"undecidable (t{o:+d} by {gap:.2f} deg)",
                            f"{what} t{o:+d} fits slightly better than t{declared:+d} ({gap:.2f} deg), within the "
                            "precision-noise allowance: not decided", fault)]
    ok = o == declared
    return [finding(check, "pass" if ok else "fail", cap, label, declared, o,
                    f"{what} t{o:+d}" + ("" if ok else f"; contract says t{declared:+d} (cosines by offset "
                                              f"{ {k: round(v, 4) for k, v in scores.items()} })"), fault,
                    "" if ok else GATE_NOISE)]


@check(REFERENCE, ("K8", "K13"), gates=(GATE_NOISE,))
def check_feature_alignment(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """K13: feature rows sit at the tokens the path says (fingerprint shift search over -1..+2,
    using the first slot's declared boundary); catches rows shifted or permuted across requests.
    Rows whose neighbouring tokens the reference cannot tell apart are left out; a best offset
    within the precision-noise allowance of the declared one is undecidable (docs/gates.md)."""
    d = c.draft.target_hidden_size
    if cap.feature.shape[0] < 2 or cap.width < d or cap.rows.shape[0] != cap.feature.shape[0]:
        return [finding("feature_alignment", "skip", cap, "slot 0", c.alignment.feature, None,
                        "fewer than 2 rows: a shift cannot be told apart", "K13")]
    return _alignment("feature_alignment", c, cap, "slot 0", cap.slots(d)[0], c.aux[0], ref,
                      c.alignment.feature, "feature row t is the hidden state of token")


@check(REFERENCE, ("K13",), gates=(GATE_NOISE,))
def check_target_alignment(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """K13: the verifier row paired with feature row t is token t + alignment.target."""
    if cap.verifier_last is None:
        return []
    if (cap.verifier_last.shape[0] < 2 or cap.verifier_last.shape[-1] != c.target.hidden_size
            or cap.verifier_last.shape[0] != cap.rows.shape[0]):
        return [finding("target_alignment", "skip", cap, "verifier", c.alignment.target, None, "fewer than 2 rows", "K13")]
    b = c.verifier_last.parsed
    return _alignment("target_alignment", c, cap, "verifier", cap.verifier_last, b, ref,
                      c.alignment.target, "verifier row paired with feature row t is token")


def _offset_equal(check: str, cap: Capture, label: str, got: torch.Tensor, src: torch.Tensor, offset: int, fault: str) -> list[Finding]:
    idx = cap.rows + offset
    v = (idx >= 0) & (idx < src.shape[0])
    if not bool(v.any()):
        return [finding(check, "skip", cap, label, offset, None, "no rows inside the sequence at this offset", fault)]
    bad = (got[v].long() != src[idx[v]].long()).nonzero().flatten()
    ok = bad.numel() == 0
    return [finding(check, "pass" if ok else "fail", cap, label, f"row t pairs with source[t{offset:+d}]",
                    "all rows" if ok else f"{bad.numel()} rows differ, first at row {int(bad[0])}",
                    f"{label} of row t is source token t{offset:+d}" if ok else
                    f"{label} does not pair row t with t{offset:+d}: {bad.numel()} of {int(v.sum())} rows differ", fault)]


@check(CAPTURE, ("K13",), stored=TENSORS)
def check_input_token_alignment(c: Contract, cap: Capture) -> list[Finding]:
    """K13: the draft input id paired with feature row t is token t + alignment.input_token."""
    if cap.draft_input_ids is None:
        return []
    accepted = cap.provenance.get("accepted")
    if accepted is not None:
        # after verify only accepted rows pair with a known next token: row j < accepted-1 pairs
        # with draft token j+1; the last accepted row pairs with the bonus (sampled) token
        from dataclasses import replace as _replace

        k = max(int(accepted) - 1, 0)
        if k == 0:
            return [finding("input_token_alignment", "skip", cap, "input ids", c.alignment.input_token, None,
                            "only the bonus token was accepted: no row pairs with a known token", "K13")]
        cap = _replace(cap, rows=cap.rows[:k], draft_input_ids=cap.draft_input_ids[:k])
    return _offset_equal("input_token_alignment", cap, "input ids", cap.draft_input_ids, cap.token_ids,
                         c.alignment.input_token, "K13")


@check(CAPTURE, ("K13",), stored=TENSORS)
def check_loss_mask_alignment(c: Contract, cap: Capture) -> list[Finding]:
    """K13: the loss-mask entry paired with feature row t is the dataset's mask at t + alignment.loss_mask."""
    if cap.loss_mask is None or cap.source_loss_mask is None:
        return []
    return _offset_equal("loss_mask_alignment", cap, "loss mask", cap.loss_mask, cap.source_loss_mask,
                         c.alignment.loss_mask, "K13")


@check(CAPTURE, ("K14",), stored=TENSORS)
def check_position_alignment(c: Contract, cap: Capture) -> list[Finding]:
    """K14: row t gets position id t + offset, advancing by one per row. The offset is
    ``alignment.position`` on the training path (speculators' shift_batch starts positions at 1)
    and ``alignment.serving_position`` on SGLang paths (the draft reuses the target's positions)."""
    if cap.position_ids is None or not cap.position_ids.numel():
        return []
    off = c.alignment.position if cap.stored else c.alignment.serving_position
    want = cap.rows + off
    p = cap.position_ids.long()
    bad = (p != want).nonzero().flatten()
    ok = bad.numel() == 0
    return [finding("position_alignment", "pass" if ok else "fail", cap, None, f"t{off:+d}",
                    "all rows" if ok else f"row {int(bad[0])}: {int(p[bad[0]])} != {int(want[bad[0]])}",
                    f"positions are t{off:+d}" if ok else
                    f"{bad.numel()} rows have the wrong position id (first: row {int(bad[0])} has "
                    f"{int(p[bad[0]])}, expected {int(want[bad[0]])})", "K14")]
