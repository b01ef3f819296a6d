"""Faults of the 2026 field reports R53-R82 (issue 37) and R84-R106 (issue 45) that the K1-K14 paths carry:
a slot that holds no hidden state at all (R66: all-zero states from a hybrid verifier's KV page; a buffer
row repeated over every token), boundary ids ending in L read by a +1 engine (R53: every tap one deeper,
the last, L + 1, never captured), and a dataset written by two writers that read id L - 1 differently
(R90: B_L in some samples, F in the others)."""

from __future__ import annotations

from eagle3_conformance.environment import torch_env

torch_env.prepare()
import torch  # noqa: E402

from eagle3_conformance.faults.example import Knobs  # noqa: E402
from eagle3_conformance.faults.operators.base import (  # noqa: E402
    Apply,
    NotApplicable,
    Operator,
    aux_indices,
    both,
    serving_config,
    slot_map,
)

KINDS = {
    "K3": "final layer capture unreachable",
    "K4": "norm / residual state",
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


def _t_final_shifted(scn, c, ex):
    """R53: the generator applied +1 to boundary ids ending in L: each slot one deeper, B_{L+1} dropped."""
    if aux_indices(c)[-1] != c.L:
        return None
    return Knobs(slots=[f"B_{b + 1}" for b in aux_indices(c) if b + 1 <= c.L] + [c.verifier_last.tensor])


def _s_final_shifted(scn, c, ex):
    """R53 on SGLang: the draft config holds boundary ids ending in L (gpt-oss-120b-Eagle3-v3's [24, 30, 36]);
    llama.py's +1 makes them layers b + 1 and drops L + 1 silently."""
    b = aux_indices(c)
    return Knobs(draft_config=serving_config(scn, b[:-1] + [c.L]))


def _t_writers_mixed(scn, c, ex):
    """R90: every other sample written by a writer that stores F for output-of id L - 1 (an HF offline
    writer, verl's old-logprob writer), the others by SGLang's online capture, which stores B_L."""
    import itertools

    if aux_indices(c)[-1] != c.L:
        return None
    # the mix shows only across samples the reference fingerprints: position 0 is excluded and the training
    # pairing's one-token shift drops one more row, so a sample of fewer than 3 tokens holds no fingerprinted
    # row (its slot_identity is a skip), and both writers' samples (even and odd) need one of at least 3 tokens
    # (a draw of [[1, 3, 3], [1, 3]] made this a fault no data could show: seen as a miss, 2026-12-05)
    if not (any(len(t) >= 3 for t in scn.samples[0::2]) and any(len(t) >= 3 for t in scn.samples[1::2])):
        return None
    j, n = len(c.aux) - 1, itertools.count()

    def tf(scn_, r, hs):
        if next(n) % 2 == 0:
            return hs
        hs = hs.clone()
        hs[:, j] = r.boundary("F").to(hs.dtype)
        return hs

    return Knobs(hs_transform=tf)


_SERVED_BY_ONE = NotApplicable("a training-data fault: one engine captures every request with one rule")

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
    Operator("final-ids-shifted", "K3", "boundary ids ending in L read by a +1 engine: every slot one deeper and "
             "B_{L+1} never captured (R53: [24, 30, 36] served as [25, 31, 37])", ("slot_count", "feature_width"), {
        "training": Apply("contract aux ends with B_L; the generator adds 1 to each id: K-1 slots, each one deeper",
                          "data files", _t_final_shifted),
        "specforge": Apply("contract aux ends with B_L; the capture adds 1 to each id: K-1 slots, each one deeper",
                           "data files", _t_final_shifted),
        **both("draft config holds boundary ids ending in L; llama.py adds 1 and never reaches L + 1",
                "engine knob (draft config)", _s_final_shifted)}, scenario="final+base"),
    Operator("writers-mixed", "K4", "a dataset written by two writers that read output-of id L - 1 differently: "
             "B_L (SGLang's online capture) in half the samples, F (an HF offline writer, verl's old-logprob writer) "
             "in the others (R90, verl-SpeCo#20/#21)", ("writer_consistency",), {
        "training": Apply("contract aux ends with B_L; every other sample's B_L slot written as F", "data files",
                          _t_writers_mixed),
        "specforge": Apply("contract aux ends with B_L; every other sample's B_L slot written as F", "data files",
                           _t_writers_mixed),
        "sglang-extend": _SERVED_BY_ONE, "sglang-decode": _SERVED_BY_ONE}, scenario="final+base"),
]
