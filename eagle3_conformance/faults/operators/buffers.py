"""What fills the draft's input buffer (K6-K9): fc sized from the wrong width, a side-path buffer
sized d instead of K*d, rows token-sharded without the all-gather, and the draft's own states
fed back instead of the target-verified ones."""

from __future__ import annotations

import math
from dataclasses import replace

from eagle3_conformance.environment import torch_env

torch_env.prepare()
import torch  # noqa: E402

from eagle3_conformance.faults.example import Knobs  # noqa: E402
from eagle3_conformance.faults.operators.base import Apply, NotApplicable, Operator, aux_indices, both, serving_config  # noqa: E402
from eagle3_conformance.faults.scenario import sglang_ids  # noqa: E402

KINDS = {
    "K6": "target vs draft hidden size",
    "K7": "side-path buffer widths",
    "K8": "parallel sharding",
    "K9": "decode state source",
}
"""The fault kinds (fault-kinds.md) of this family, as the matrix names them."""


def _s_crossed(scn, c, ex):
    if scn.spec.draft_hidden == scn.spec.target_hidden:
        return None  # masked: equal widths cannot show K6
    return Knobs(variant={"draft": {"target_hidden_size": None}})


def _s_d_buffer(scn, c, ex):
    d = c.target.hidden_size

    def buf(x):  # verify rows copied into a buffer sized d (one slot), not K*d
        out = torch.zeros(x.shape[0], d, dtype=x.dtype)
        out.copy_(x[:, :d])
        return out

    return Knobs(handoff=buf)


def _s_count_key(scn, c, ex):
    """R41: the draft's ids at the top level (where speculators writes them) and none under
    ``eagle_config``. SGLang 0.5.23 sizes the draft's fc from ``num_aux_hidden_states``, else
    ``len(eagle_config.eagle_aux_hidden_state_layer_ids)``, else 3 (``llama_eagle3.py:156-161``),
    and its capture resolver reads the nested key only: a 4-slot draft gets an fc for 3 slots."""
    ids = sglang_ids(aux_indices(c))
    if len(ids) == 3:
        return None  # masked: the default count is 3
    cfg = serving_config(scn, ids)
    cfg["eagle_aux_hidden_state_layer_ids"] = cfg["eagle_config"].pop("eagle_aux_hidden_state_layer_ids")
    return Knobs(draft_config=cfg, variant={"draft": {"eagle_config": dict(cfg["eagle_config"]),
                                                      "eagle_aux_hidden_state_layer_ids": list(ids)}})


def _t_sharded(scn, c, ex):
    if not any(len(scn.samples[i]) >= 3 for b in ex.batches for i in b):
        return None

    def tf(scn_, r, hs):  # rank 0 of 2 keeps its token shard; no gather
        return hs[: math.ceil(hs.shape[0] / 2)]

    return Knobs(hs_transform=tf)


def _s_sharded(scn, c, ex):
    def shard(scn_, caps):
        out = []
        for cap in caps:
            n = cap.feature.shape[0]
            out.append(replace(cap, feature=cap.feature[: math.ceil(n / 2)]) if n >= 2 else cap)
        return out

    return Knobs(capture=shard)


_NA_TRAIN_DRAFT_W = NotApplicable(
    "speculators 0.9.0 has one width H (the verifier's): fc = Linear(num_aux*H, H), target_hidden_size "
    "is never set (REFERENCE 5.3)")
_NA_SF_DRAFT_W = NotApplicable(
    "the offline loader hands the draft the stored K*d features; the draft's fc is sized from target_hidden_size*3 "
    "and asserts it (llama3_eagle.py:1670-1677, 1762-1770): the crossed sizing is a serving-side fault")
_NA_TRAIN_SIDE = NotApplicable("the offline loader has no side-path buffers (decode/idle/PD/graph)")
_NA_EXTEND_SIDE = NotApplicable("the extend path is the main path whose width the side paths must match")
_NA_TRAIN_DECODE = NotApplicable("offline training data has no verify step; TTT feeds draft states by design")
_NA_EXTEND_DECODE = NotApplicable("after prefill the draft always gets the target's prefill states; the "
                                  "state-source choice exists only after verify")


OPERATORS: list[Operator] = [
    Operator("hidden-sizes-crossed", "K6", "fc sized from the draft width, not the target's",
             ("fc_shape",), {
        "training": _NA_TRAIN_DRAFT_W, "specforge": _NA_SF_DRAFT_W,
        **both("draft config without target_hidden_size: SGLang sizes fc from hidden_size",
                "engine rebuild (draft config)", _s_crossed)}, scenario="wide"),
    Operator("aux-count-from-other-key", "K6", "fc built for 3 slots of a 4-slot draft: the slot count read from "
             "another key than the ids (R41)", ("fc_shape",), {
        "training": NotApplicable(
            "speculators 0.9.0 sizes fc from len(eagle_aux_hidden_state_layer_ids), the key it writes "
            "(models/eagle3/core.py:71-77)"),
        "specforge": NotApplicable(
            "SpecForge 0.2.0's draft hard-codes fc = Linear(target_hidden_size * 3) and asserts a 3-slot input "
            "(llama3_eagle.py:1674-1677, 1763): a 4-slot draft fails loudly there, and this path judges the "
            "loader's tensors, not the draft"),
        **both("4-slot draft config with its ids at the top level (speculators' placement), none under eagle_config: "
               "SGLang builds fc for its default 3 slots", "engine rebuild (draft config)", _s_count_key)},
             scenario="four"),
    Operator("decode-buffer-sized-d", "K7", "a decode-path buffer sized d instead of K*d",
             ("draft_input_width", "slot_count", "fc_ran"), {
        "training": _NA_TRAIN_SIDE, "specforge": _NA_TRAIN_SIDE, "sglang-extend": _NA_EXTEND_SIDE,
        "sglang-decode": Apply("verify rows copied into a d-wide buffer before the real draft extend",
                               "in memory (handoff buffer)", _s_d_buffer)}),
    Operator("token-sharded-rows", "K8", "rows token-sharded as under TP, no gather",
             ("row_count", "sample_available", "feature_alignment", "row_fingerprint"), {
        "training": Apply("generator on rank 0 of 2 stores only its token shard of each sample", "data files",
                          _t_sharded),
        "specforge": Apply("capture on rank 0 of 2 stores only its token shard of the hidden states", "data files",
                           _t_sharded),
        **both("rank 0's token shard handed on without the all-gather", "in memory (after the engine)",
                _s_sharded)}),
    Operator("draft-states-fed-back", "K9", "draft states instead of target-verified ones",
             ("draft_input_width", "slot_count", "fc_ran"), {
        "training": _NA_TRAIN_DECODE, "specforge": _NA_TRAIN_DECODE, "sglang-extend": _NA_EXTEND_DECODE,
        "sglang-decode": Apply("harness feed_draft_states: the draft's own FULL output states are fed back",
                               "engine knob (feed_draft_states)", lambda s, c, e: Knobs(feed_draft_states=True))}),
]
