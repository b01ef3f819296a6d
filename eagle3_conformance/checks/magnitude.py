"""Magnitude against the reference (the right direction at the wrong scale) and the draft's
pre-fc norm (what reached fc is the draft input transformed as declared)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from eagle3_conformance.checks.common import GATE_ROW_FLOOR, finding, keep_rows, slot_label, usable, verifier_rows
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


def _ratio_stats(x: torch.Tensor, r: torch.Tensor) -> dict:
    """Per-token RMS of ``x`` against ``r`` ([n, d] each): median ratio, its p90/p10 spread, and
    the median and p90/p10 spread of ``x``'s own per-token RMS."""
    from eagle3_conformance.reference import rms

    rx, rr = rms(x), rms(r)
    ok = (rr > 0) & torch.isfinite(rx) & torch.isfinite(rr)
    rx, rr = rx[ok], rr[ok]
    if not rx.numel():
        return {}
    ratio = rx / rr

    def spread(v: torch.Tensor) -> float:
        lo, hi = float(torch.quantile(v, 0.1)), float(torch.quantile(v, 0.9))
        return hi / lo if lo > 0 else float("inf")

    return {"rms_ratio": float(ratio.median()), "ratio_spread": spread(ratio),
            "slot_rms": float(rx.median()), "slot_rms_spread": spread(rx), "tokens": int(rx.numel())}


@check(REFERENCE, ("K4", "K12"), gates=(GATE_ROW_FLOOR,))
def check_magnitude(c: Contract, cap: Capture, ref: Reference, max_ratio: Optional[float] = None) -> list[Finding]:
    """K4/K12: a slot that points the way of its declared boundary (mean cosine >=
    ``gates.slot_identity_min_cosine``) also has its magnitude: the median over tokens of
    ``rms(slot_t) / rms(B_t)`` lies in ``[1/max_ratio, max_ratio]`` (default by serving dtype:
    :func:`eagle3_conformance.core.gates.magnitude_max_ratio`, 1.1 float32, 3.0 bf16; docs/gates.md).

    Compares with the reference itself, so it needs no calibrated norm bands: it catches a slot
    normalized without its norm weights (per-token RMS 1) and a rescaled slot (FP8 read without
    its scales, a stray factor), which fingerprints cannot see (cosine is scale-free). Slots that
    point elsewhere are skipped: ``slot_identity`` / ``verifier_identity`` report what they are.

    ``observed`` is a dict: ``rms_ratio`` (median slot/reference), ``ratio_spread`` (p90/p10 of
    the per-token ratio: ~1 for a constant rescale), ``slot_rms`` (median per-token RMS of the
    slot: ~1 when normalized without weights), ``slot_rms_spread``, ``tokens``.
    """
    d = c.draft.target_hidden_size
    if not usable(cap, d):
        return [finding("magnitude", "skip", cap, None, None, None, "no rows to compare", "K4")]
    gate = gates.row_min_cosine(c, cap.stored)
    max_ratio = max_ratio if max_ratio is not None else gates.magnitude_max_ratio(c, cap.stored)
    want = f"median rms(slot)/rms(reference) in [{1 / max_ratio:.3g}, {max_ratio:.3g}]"
    targets: list[tuple[str, Boundary, torch.Tensor, torch.Tensor]] = [
        (slot_label(i), c.aux[i], s, cap.rows) for i, s in enumerate(cap.slots(d))
        if i < c.num_slots and s.shape[-1] == d]
    if cap.verifier_last is not None and cap.verifier_last.shape[-1] == c.target.hidden_size \
            and cap.verifier_last.shape[0] == cap.rows.shape[0]:
        targets.append(("verifier", c.verifier_last.parsed, cap.verifier_last, verifier_rows(c, cap)))
    out = []
    T = ref.stack.shape[1]
    for label, b, x, rows in targets:
        valid = (rows >= 0) & (rows < T)
        keep = valid & keep_rows(c, rows)
        if not bool(keep.any()):
            out.append(finding("magnitude", "skip", cap, label, want, None, "every row is excluded or outside the "
                               "sequence", "K4"))
            continue
        xs, rs = x.float()[keep], ref.boundary(b)[rows[keep]]
        fin = torch.isfinite(xs).all(-1)
        xs, rs = xs[fin], rs[fin]
        if not xs.shape[0]:
            out.append(finding("magnitude", "skip", cap, label, want, None, "no finite rows", "K4"))
            continue
        cos = float(torch.nn.functional.cosine_similarity(xs, rs, dim=-1).mean())
        if cos < gate:
            out.append(finding("magnitude", "skip", cap, label, want, None,
                               f"{label} does not point the way of {b} (cos {cos:.4f}): identity checks report what it "
                               "is", "K4"))
            continue
        st = _ratio_stats(xs, rs)
        if not st:
            out.append(finding("magnitude", "skip", cap, label, want, None, f"{b} has zero RMS on these rows", "K4"))
            continue
        r = st["rms_ratio"]
        ok = 1 / max_ratio <= r <= max_ratio
        msg = (f"{label} ({b}) per-token RMS is {r:.3f}x the reference's (median over {st['tokens']} tokens, "
               f"cos {cos:.4f})")
        if not ok:
            msg += f": the right direction at the wrong magnitude (slot RMS median {st['slot_rms']:.3g})"
        out.append(finding("magnitude", "pass" if ok else "fail", cap, label, want, {**st, "cos": cos}, msg, "K4"))
    return out


#: residual of a least-squares fit below which the fc input counts as that transform of the draft input
PRE_FC_FIT_TOL = 1e-2


def _rmsnorm_fit(x: torch.Tensor, y: torch.Tensor, width: int) -> float:
    """Relative residual of ``y`` as ``RMSNorm(x)`` applied over consecutive ``width``-wide chunks
    with a per-dimension weight fitted by least squares (weight-free: any learned weight fits)."""
    n, w = x.shape
    if w % width:
        return float("inf")
    xc = x.reshape(n, w // width, width)
    u = (xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + 1e-12)).reshape(n, w)
    g = (u * y).sum(0) / u.pow(2).sum(0).clamp_min(1e-12)
    return float((y - u * g).norm() / y.norm().clamp_min(1e-12))


@check(CAPTURE, ("K4",), stored=TENSORS)
def check_pre_fc_norm(c: Contract, cap: Capture) -> list[Finding]:
    """K4 (vllm-project/vllm#38111, sgl-project/sglang#32334): the tensor that reached the draft's
    ``fc`` is the draft input transformed as ``draft.pre_fc_norm`` declares: ``none`` -> the raw
    aux concat; ``norm_before_fc`` -> one RMSNorm over the whole K*d concat; ``fc_norm`` -> an
    RMSNorm per d-wide slot (weights fitted, so any learned weight passes).

    Needs ``cap.fc_input`` ([N, K*d], recorded by an fc hook on engine paths) and compares it
    with ``cap.fc_source`` (the draft input of the same forward; ``cap.feature`` when absent);
    returns [] where the path records none (training data, or fc did not run: ``fc_ran`` reports
    that). ``observed`` is the state found: "none", "norm_before_fc", "fc_norm" or "other".
    """
    y = cap.fc_input
    if y is None:
        return []
    x = cap.fc_source if cap.fc_source is not None else cap.feature
    if y.shape != x.shape or not y.shape[0]:
        return [finding("pre_fc_norm", "skip", cap, "fc input", c.draft.pre_fc_norm, None,
                        f"fc input {list(y.shape)} is not the draft input {list(x.shape)}: cannot compare", "K4")]
    xf, yf = x.float(), y.float()
    fin = torch.isfinite(xf).all(-1) & torch.isfinite(yf).all(-1)
    xf, yf = xf[fin], yf[fin]
    if not xf.shape[0]:
        return [finding("pre_fc_norm", "skip", cap, "fc input", c.draft.pre_fc_norm, None, "no finite rows", "K4")]
    d = c.draft.target_hidden_size
    raw = float((yf - xf).norm() / yf.norm().clamp_min(1e-12))
    fits = {"none": raw, "norm_before_fc": _rmsnorm_fit(xf, yf, xf.shape[-1]), "fc_norm": _rmsnorm_fit(xf, yf, d)}
    best = min(fits, key=fits.__getitem__)
    got = best if fits[best] <= PRE_FC_FIT_TOL else "other"
    if got == "norm_before_fc" and fits["fc_norm"] <= PRE_FC_FIT_TOL and c.draft.pre_fc_norm == "fc_norm":
        got = "fc_norm"  # K = 1: one slot is the whole concat
    want = c.draft.pre_fc_norm
    ok = got == want
    words = {"none": "the raw aux concat (no pre-fc norm)", "norm_before_fc": "RMSNorm over the whole concat "
             "(norm_before_fc)", "fc_norm": "RMSNorm per slot (fc_norm)", "other": "neither the raw concat nor "
             "its RMSNorm"}
    msg = f"the draft's fc received {words[got]}" + ("" if ok else f"; contract says draft.pre_fc_norm: {want}")
    return [finding("pre_fc_norm", "pass" if ok else "fail", cap, "fc input", want, got, msg, "K4")]
