"""Which row goes with which token (K13, K14, and K9's rows after verify): rows assigned to the wrong
request of a batch, accepted verify rows padded or read at the wrong offsets (R43, R52), and
position ids that do not advance."""

from __future__ import annotations

from dataclasses import replace

from eagle3_conformance.environment import torch_env

torch_env.prepare()
import torch  # noqa: E402

from eagle3_conformance.faults.example import Knobs  # noqa: E402
from eagle3_conformance.faults.operators.base import Apply, NotApplicable, Operator, both, rotate_rows  # noqa: E402

KINDS = {
    "K13": "capture row alignment",
    "K14": "positions",
}
"""The fault kinds (fault-kinds.md) of this family, as the matrix names them."""


def _t_permute(scn, c, ex):
    if len(scn.samples) < 2:
        return None
    return Knobs(rows_from=rotate_rows)


def _s_permute(scn, c, ex):
    def perm(scn_, caps):
        if len(caps) < 2:
            return caps
        parts = rotate_rows([cap.feature for cap in caps])
        return [replace(cap, feature=p) for cap, p in zip(caps, parts)]

    return Knobs(capture=perm)


def _freeze_positions(scn, caps):
    out = []
    for cap in caps:
        p = cap.position_ids
        if p is not None and p.numel() >= 2:
            cap = replace(cap, position_ids=torch.full_like(p, int(p[0])))
        out.append(cap)
    return out


def _sf_double_shift(sample):
    """The pre-SpecForge#448 offline path (2025-11-20 .. 2026-01-22): ``OfflineEagle3Dataset.process_data``
    also shifted ``target`` and ``input_ids`` left (specforge.utils.padding) before ``TargetHead.preprocess``
    shifted them again: h_t paired with x_t+2 and F_t+2."""
    from specforge.utils import padding

    return {**sample, "target": padding(sample["target"], left=False),
            "input_ids": padding(sample["input_ids"], left=False)}


def _accepted(cap) -> int:
    return min(int(cap.provenance.get("accepted", cap.feature.shape[0])), cap.feature.shape[0])


def _pad_to_window(scn, caps):
    """R43 (vllm-ascend#8433): each request's accepted verify rows handed on padded to the verify
    window with zero rows in front (padding never indexed out), so after a partial accept the
    accepted tokens get padding and their neighbours' rows."""
    out = []
    for cap in caps:
        a, n = _accepted(cap), cap.feature.shape[0]
        f = torch.cat([torch.zeros_like(cap.feature[: n - a]), cap.feature[:a]])
        out.append(replace(cap, feature=f))
    return out


def _compacted_offsets(scn, caps):
    """R52 (ik_llama.cpp#1894): request i's rows read from the batch's uncompacted verify buffer
    (num_draft_tokens rows per request) at the compacted offset sum(accepted[:i]): after a partial
    accept every later request gets rows of the request before it."""
    flat = torch.cat([cap.feature for cap in caps])
    out, start = [], 0
    for cap in caps:
        n = cap.feature.shape[0]
        out.append(replace(cap, feature=flat[start:start + n] if start + n <= flat.shape[0] else
                           torch.cat([flat[start:], flat[: start + n - flat.shape[0]]])))
        start += _accepted(cap)
    return out


def _positions(scn, c, ex):
    return Knobs(capture=_freeze_positions)


_NA_SPECULATORS_SHIFT = NotApplicable(
    "speculators 0.9.0 shift_batch shifts input_ids, hidden states, verifier states and loss_mask together, once "
    "(models/eagle3/data.py:8-44): SpecForge's pairing is not in its loader")
_NA_SERVING_MASK = NotApplicable("serving has no loss mask and no training-time shift")
_NA_NO_VERIFY = NotApplicable("no verify step on this path: nothing is accepted, so no rows are chosen after "
                              "acceptance")

OPERATORS: list[Operator] = [
    Operator("rows-permuted-across-requests", "K13", "rows assigned to the wrong request in a batch",
             ("row_fingerprint", "slot_identity", "feature_alignment", "verifier_identity", "row_count"), {
        "training": Apply("generator writes each sample's rows from a flat buffer split in the wrong request "
                          "order", "data files", _t_permute),
        "specforge": Apply("capture writes each sample's rows from a flat buffer split in the wrong request order",
                           "data files", _t_permute),
        **both("a connector splits the batch's flat rows in the wrong request order",
                "in memory (after the engine)", _s_permute)}),
    Operator("decode-rows-padded", "K13", "accepted verify rows padded to the verify window, padding never indexed "
             "out (R43)", ("verified_rows", "row_fingerprint"), {
        "training": _NA_NO_VERIFY, "specforge": _NA_NO_VERIFY, "sglang-extend": _NA_NO_VERIFY,
        "sglang-decode": Apply("worker hands the draft extend each request's accepted rows left-padded with zero rows "
                               "to num_draft_tokens", "in memory (worker stand-in)",
                               lambda s, c, e: Knobs(capture=_pad_to_window))}),
    Operator("wrong-verified-rows", "K9", "the wrong verified rows after a partial accept: uncompacted rows read at "
             "compacted offsets (R52)", ("verified_rows", "row_fingerprint"), {
        "training": _NA_NO_VERIFY, "specforge": _NA_NO_VERIFY, "sglang-extend": _NA_NO_VERIFY,
        "sglang-decode": Apply("worker reads request i's rows from the uncompacted verify buffer at sum(accepted[:i])",
                               "in memory (worker stand-in)", lambda s, c, e: Knobs(capture=_compacted_offsets))}),
    Operator("positions-not-advanced", "K14", "every row gets the same position id", ("position_alignment",), {
        "training": Apply("trainer hands every row the first position id", "in memory (after the loader)", _positions),
        "specforge": Apply("trainer hands every row the first position id", "in memory (after the loader)", _positions),
        **both("worker hands the draft the first position for every row", "in memory (worker stand-in)",
                _positions)}),
    Operator("loss-mask-unshifted", "K13", "loss mask left unshifted while ids and target are shifted",
             ("loss_mask_alignment",), {
        "training": _NA_SPECULATORS_SHIFT,
        "specforge": Apply("SpecForge 0.2.0's TargetHead.preprocess leaves loss_mask unshifted where the contract "
                           "states the fixed pairing (mask shifted with ids and target; SpecForge#885, #895)",
                           "trainer (contract states the fixed pairing)",
                           lambda s, c, e: Knobs(alignment={"loss_mask": c.alignment.target, "loss_mask_reason": None})),
        "sglang-extend": _NA_SERVING_MASK, "sglang-decode": _NA_SERVING_MASK}),
    Operator("double-shift", "K13", "ids and target shifted twice: h_t paired with x_t+2 (SpecForge#448)",
             ("target_alignment", "input_token_alignment"), {
        "training": _NA_SPECULATORS_SHIFT,
        "specforge": Apply("the pre-#448 offline dataset also shifts target and input_ids before "
                           "TargetHead.preprocess shifts them again", "trainer (per-sample transform)",
                           lambda s, c, e: Knobs(sf_transform=_sf_double_shift)),
        "sglang-extend": _NA_SERVING_MASK, "sglang-decode": _NA_SERVING_MASK}),
]
