"""Faults of the 2026 field reports R53-R82 (issue 37) that the K1-K14 paths carry: a slot that holds
no hidden state at all (R66: all-zero states from a hybrid verifier's KV page; a buffer row repeated
over every token)."""

from __future__ import annotations

from eagle3_conformance import torch_env

torch_env.prepare()
import torch  # noqa: E402

from eagle3_conformance.faults.example import Knobs  # noqa: E402
from eagle3_conformance.faults.operators.base import Apply, Operator, both, slot_map  # noqa: E402

KINDS = {
    "K7": "side-path buffer widths",
}
"""The fault kinds (fault-kinds.md) of this family, as the matrix names them."""


def _t_zero(scn, c, ex):
    j = len(c.aux) - 1  # the deepest aux slot

    def tf(scn_, r, hs):
        hs = hs.clone()
        hs[:, j] = 0
        return hs

    return Knobs(hs_transform=tf)


def _s_zero(scn, c, ex):
    return Knobs(capture=slot_map(c, len(c.aux) - 1, lambda scn_, cap, x: torch.zeros_like(x)))


def _t_repeated(scn, c, ex):
    j = len(c.aux) - 1

    def tf(scn_, r, hs):
        if hs.shape[0] < 2:
            return hs
        hs = hs.clone()
        hs[:, j] = hs[:1, j].expand_as(hs[:, j])
        return hs

    return Knobs(hs_transform=tf)


def _s_repeated(scn, c, ex):  # a 1-row capture is unchanged: the run raises NoOp
    return Knobs(capture=slot_map(c, len(c.aux) - 1, lambda scn_, cap, x: x[:1].expand_as(x).clone()))


OPERATORS: list[Operator] = [
    Operator("slot-all-zero", "K7", "the deepest aux slot written as zeros: the capture read an empty KV page "
             "(R66, vllm#46301: hybrid verifier, block size 528 vs 22)", ("slot_degenerate",), {
        "training": Apply("deepest aux slot stored as zeros in every sample", "data files", _t_zero),
        "specforge": Apply("deepest aux slot stored as zeros in every sample", "data files", _t_zero),
        **both("deepest aux slot handed over as zeros (an unfilled capture buffer)", "in memory (after the engine)",
                _s_zero)}),
    Operator("slot-row-repeated", "K7", "the deepest aux slot holds its first row for every token: a capture buffer "
             "whose row index never advanced", ("slot_degenerate",), {
        "training": Apply("deepest aux slot stored as its first row repeated", "data files", _t_repeated),
        "specforge": Apply("deepest aux slot stored as its first row repeated", "data files", _t_repeated),
        **both("deepest aux slot handed over as its first row repeated over every token",
                "in memory (after the engine)", _s_repeated)}),
]
