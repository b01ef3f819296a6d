"""Which row goes with which token (K13, K14): rows assigned to the wrong request of a batch, and
position ids that do not advance."""

from __future__ import annotations

from dataclasses import replace

from conformance import torch_env

torch_env.prepare()
import torch  # noqa: E402

from conformance.faults.example import Knobs  # noqa: E402
from conformance.faults.operators.base import Apply, Operator, both, rotate_rows  # noqa: E402

KINDS = {
    "K13": "capture row alignment",
    "K14": "positions",
}
"""The fault kinds (FAULTS.md) of this family, as the matrix names them."""


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


def _positions(scn, c, ex):
    return Knobs(capture=_freeze_positions)


OPERATORS: list[Operator] = [
    Operator("rows-permuted-across-requests", "K13", "rows assigned to the wrong request in a batch",
             ("row_fingerprint", "slot_identity", "feature_alignment", "verifier_identity", "row_count"), {
        "training": Apply("generator writes each sample's rows from a flat buffer split in the wrong request "
                          "order", "data files", _t_permute),
        **both("a connector splits the batch's flat rows in the wrong request order",
                "in memory (after the engine)", _s_permute)}),
    Operator("positions-not-advanced", "K14", "every row gets the same position id", ("position_alignment",), {
        "training": Apply("trainer hands every row the first position id", "in memory (after the loader)", _positions),
        **both("worker hands the draft the first position for every row", "in memory (worker stand-in)",
                _positions)}),
]
