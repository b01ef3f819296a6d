"""Which dtype the hidden states are in (K12): stored or served in another dtype than the
contract's, and hs-connectors 0.9.0's FP8 transport of training data (hs_connectors/fp8_utils.py, transfer.py):
FP8 files read as plain files (values never rescaled), and one FP8 scale per token shared by all
slots, coarsened by a massive value in B_L."""

from __future__ import annotations

from eagle3_conformance.faults.example import Knobs
from eagle3_conformance.faults.operators.base import Apply, NotApplicable, Operator, both

#: fp8-scale-outlier: the massive value written into B_L, as a multiple of the first aux slot's RMS at
#: that token. The shared scale becomes value / 448, so the first slot's RMS sits at 448 / 2e5 = 2^-8.8
#: in FP8 units, below e4m3's smallest normal 2^-6: most of its values flush to zero. On SmolLM2-135M
#: (B_4 RMS ~2.5, B_L amax ~480) this is ~1000x the token's amax, measured by
#: benchmarks/bench_fp8_transport.py (docs/gates.md): B_4's per-token error 0.35, 87% of its values zero;
#: x300 amax gives 0.13, x100 0.05 (within the 0.10 default gate).
OUTLIER_RATIO = 2e5

_NOT_HSC = {
    "specforge": NotApplicable("SpecForge's offline files are torch.save dicts read by its own loader, not "
                               "hs-connectors safetensors (no FP8 backend)"),
    "sglang-extend": NotApplicable("serving hands hidden states to the draft in memory; hs-connectors transports "
                                   "training data only"),
    "sglang-decode": NotApplicable("serving hands hidden states to the draft in memory; hs-connectors transports "
                                   "training data only"),
}

KINDS = {
    "K12": "dtype",
}
"""The fault kinds (fault-kinds.md) of this family, as the matrix names them."""


def _t_dtype(scn, c, ex):
    return Knobs(disk_dtype="float32" if c.data_dtype != "float32" else "bfloat16")


def _s_dtype(scn, c, ex):
    return Knobs(variant={"dtype": "bfloat16" if c.target.dtype != "bfloat16" else "float32"})


def _t_fp8_as_file(scn, c, ex):
    return Knobs(transfer_write="fp8")  # the trainer reads with the contract's backend: file


def _t_fp8_outlier(scn, c, ex):
    def tf(scn_, r, hs):
        hs = hs.clone()
        t = hs.shape[0] // 2  # a middle token (not an excluded position; inside the shifted feature rows)
        hs[t, -1, 0] = OUTLIER_RATIO * float(hs[t, 0].pow(2).mean().sqrt())
        return hs

    return Knobs(hs_transform=tf, transfer_write="fp8", transfer_read="fp8")


def _t_fp8_good(scn, c, ex):
    return Knobs(transfer_write="fp8", transfer_read="fp8")  # correct FP8 data, read with FP8Transfer


OPERATORS: list[Operator] = [
    Operator("dtype-cast", "K12", "hidden states in the wrong dtype", ("dtype", "tensor_dtype"), {
        "training": Apply("hidden states stored as float32 (contract: bfloat16)", "data files", _t_dtype),
        "specforge": Apply("aux_hidden_state / hidden_state stored as float32 (contract: bfloat16)", "data files",
                           _t_dtype),
        **both("engine built with ServerArgs.dtype bfloat16 (contract: float32)", "engine rebuild (dtype)",
                _s_dtype)}),
    Operator("fp8-read-as-file", "K12", "FP8 training data read as plain files (values never rescaled)",
             ("transfer_backend", "dtype", "magnitude", "fp8_scale_error"), {
        "training": Apply("files written by hs-connectors' fp8 backend (float8_e4m3fn + per-token scales); the "
                          "trainer reads them with the file backend (contract training.transfer: file)",
                          "data files", _t_fp8_as_file, baseline=_t_fp8_good),
        **_NOT_HSC}),
    Operator("fp8-scale-outlier", "K12", "a massive value in B_L coarsens the early slots through FP8's shared "
             "per-token scale", ("fp8_scale_error",), {
        "training": Apply(f"one value of B_L at a middle token set to {OUTLIER_RATIO:g}x the first aux slot's RMS there, "
                          "written "
                          "by hs-connectors' fp8 backend and read with FP8Transfer (training.transfer: fp8)",
                          "data files", _t_fp8_outlier, baseline=_t_fp8_good),
        **_NOT_HSC}),
]
