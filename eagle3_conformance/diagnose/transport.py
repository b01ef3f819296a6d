"""Diagnoses of the transport checks (checks/transport.py): hs-connectors FP8 data read without
its scales, or coarsened by the shared per-token scale."""

from __future__ import annotations

from eagle3_conformance.contract import Contract
from eagle3_conformance.diagnose.base import Diagnosis, _PathView
from eagle3_conformance.diagnose.fixes import _Fixer
from eagle3_conformance.diagnose.precision import used_precision


def _fp8_transport(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """hs-connectors transport (checks ``transfer_backend``, ``fp8_scale_error``)."""
    out = []
    tb = v.failing("transfer_backend")
    n_tb = len([f for f in v.by_check.get("transfer_backend", []) if f.status != "skip"])
    if tb:
        kinds = {k for f in tb if isinstance(f.observed, dict) for k in f.observed.get("problems") or ()}
        unscaled = [f for f in tb if "never rescaled" in f.message]
        first = tb[0].observed if isinstance(tb[0].observed, dict) else {}
        dtype = first.get("dtype", "plain")
        title = ("FP8 data read without its scales: values never rescaled" if unscaled else
                 "the hidden-states files do not match the hs-connectors backend the contract declares")
        ev = (tb[0].message, "every row keeps its direction (cosine fingerprints pass) but is off by its own "
              "per-token factor 448/amax: the per-token FP8 scale was never applied")
        fix: tuple[str, ...] = ()
        if "plain-as-fp8" in kinds:
            fix += (f"the files are plain {dtype}: declare training.transfer: file, or regenerate with the FP8 "
                    "connector (hs-connectors FP8HiddenStatesConnector)",)
        if "scales-beside-plain" in kinds:
            title = "plain hidden states with a hidden_states_scales tensor beside them (not FP8 data)"
            fix += (f"the files hold plain {dtype} hidden states with a stray hidden_states_scales tensor: write them "
                    "without it (vLLM's ExampleHiddenStatesConnector, hs-connectors file backend), or regenerate the "
                    "data with the FP8 connector (float8_e4m3fn hidden_states plus their scales)",)
        if kinds & {"scales-shape", "scales-dtype", "bad-scale"}:
            title = "the FP8 files' hidden_states_scales are not what FP8Transfer can apply"
            fix += ("the scales must be float32 [T, 1, 1], one positive scale per token (amax/448 clamped at 1e-12: "
                    "hs_connectors.fp8_utils.quantize_tensor_to_fp8, fp8_utils.py:29-51): regenerate with the FP8 "
                    "connector",)
        if "fp8-without-scales" in kinds:
            fix += ("the float8 files lost their hidden_states_scales: regenerate with the FP8 connector, which "
                    "writes both", )
        if "fp8-read-as-file" in kinds or not fix:
            fix += ("read FP8 data with hs-connectors' fp8 backend (FP8Transfer; speculators ArrowDataset(transfer=...), "
                    "speculators train config data.hidden_states_backend: fp8, train/config/resolution.py:444) and "
                    "declare training.transfer: fp8 in the contract",
                    "or regenerate the data with the file backend (plain bf16 hidden states)")
        out.append(Diagnosis("fp8-transport", "K12", title, ev[:1] + ((ev[1],) if unscaled else ()), fix,
                             (v.path,), ("feature",), ("transfer_backend",) + tuple(
                                 ch for ch in ("dtype", "magnitude", "fp8_scale_error") if v.failing(ch)),
                             {v.path: f"{len(tb)}/{n_tb} {v.unit}"}))
        used.update({"transfer_backend", "magnitude", "fp8_scale_error", "dtype"})
        return out
    fe = [f for f in v.failing("fp8_scale_error") if f not in used_precision(used)]
    if fe:
        worst = max(fe, key=lambda f: float(f.observed.get("max", 0)) if isinstance(f.observed, dict) else 0)
        n_fe = len([f for f in v.by_check.get("fp8_scale_error", []) if f.status != "skip"])
        out.append(Diagnosis(
            "fp8-transport", "K12", "training values far from the reference at some tokens (FP8's shared per-token "
            "scale coarsens small slots)", (worst.message,),
            ("find what makes that token's amax large (a massive activation, a stray value in B_L); FP8 with one "
             "scale per token cannot carry a small slot beside it: store those samples with the file backend (bf16), "
             "or raise gates.fp8_max_relative_error only with a measured reason",),
            (v.path,), tuple(sorted({f.slot for f in fe if f.slot})), ("fp8_scale_error",),
            {v.path: f"{len(fe)}/{n_fe} slot findings"}))
        used.add("fp8_scale_error")
    return out
