"""Availability, shape and dtype of one capture: did the sample load, are there K slots of
target_hidden_size, are dtypes the contract's, are values finite, is there one row per token."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eagle3_conformance.checks.common import dtype_name, finding
from eagle3_conformance.checks.registry import CAPTURE, DTYPES, ROW_RMS, TENSORS, check
from eagle3_conformance.contract import Contract
from eagle3_conformance.core.capture import Capture
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.core.served_dtype import served_dtype_words

if TYPE_CHECKING:
    import torch
else:  # imported at first use: the package loads without torch (core installs)
    from eagle3_conformance.environment.torch_env import lazy_torch as torch


@check(CAPTURE, ("K8", "K11", "K13"), stored=TENSORS, always=True)
def check_sample_available(c: Contract, cap: Capture) -> list[Finding]:
    """K11/K13: the path produced the sample (speculators skips a sample whose stored token ids
    differ from the dataset's, with only a warning; such skips must be zero)."""
    if cap.unavailable:
        return [finding("sample_available", "fail", cap, None, "sample loads", cap.unavailable,
                        f"the loader produced nothing for this sample: {cap.unavailable}", "K13")]
    return [finding("sample_available", "pass", cap, None, "sample loads", "loaded", "sample loaded", "K13")]


@check(CAPTURE, ("K1", "K3", "K5", "K7", "K9"), stored=TENSORS, rowless=True)
def check_slot_count(c: Contract, cap: Capture) -> list[Finding]:
    """K3/K5: the draft input holds exactly K blocks of target_hidden_size."""
    d, K, W = c.draft.target_hidden_size, c.num_slots, cap.width
    n = W / d
    ok = W % d == 0 and int(n) == K
    obs = int(n) if W % d == 0 else f"{W}/{d} (not a whole number of slots)"
    msg = (f"{K} slots of {d}" if ok else
           f"the draft input holds {obs} slots of {d}; contract says {K}")
    return [finding("slot_count", "pass" if ok else "fail", cap, "feature", K, obs, msg, "K3")]


@check(CAPTURE, ("K3", "K5", "K6", "K7", "K9"), emits=("feature_width", "draft_input_width", "verifier_width"),
       stored=TENSORS, rowless=True)
def check_width(c: Contract, cap: Capture) -> list[Finding]:
    """K5/K6/K7: concatenated width equals K x target_hidden_size, and each slot is d wide."""
    want = c.capture.feature_width
    out = [finding("feature_width", "pass" if cap.width == want else "fail", cap, "feature", want, cap.width,
                   f"feature is {cap.width} wide; contract says {c.num_slots} x {c.draft.target_hidden_size} = {want}",
                   "K5")]
    if cap.draft_input_width is not None:
        ok = cap.draft_input_width == want
        out.append(finding("draft_input_width", "pass" if ok else "fail", cap, "feature", want,
                           cap.draft_input_width,
                           f"the draft received a {cap.draft_input_width}-wide input; contract says {want}", "K5"))
    if cap.verifier_last is not None:
        vw = int(cap.verifier_last.shape[-1])
        ok = vw == c.target.hidden_size
        out.append(finding("verifier_width", "pass" if ok else "fail", cap, "verifier", c.target.hidden_size, vw,
                           f"verifier slot is {vw} wide; target hidden size is {c.target.hidden_size}", "K6"))
    return out


@check(CAPTURE, ("K12",), emits=("dtype", "id_dtype"), stored=DTYPES)
def check_dtype(c: Contract, cap: Capture) -> list[Finding]:
    """K12: hidden states carry the contract's dtype; token ids are int64.

    A stored dtype other than ``data_dtype`` fails even when every slot holds its declared boundary: the
    precision gates follow the declared generation, so data of another dtype is judged by gates set for
    other noise, and the contract's claim about the generator is false (docs/speculators-generator.md, "A
    stored dtype other than data_dtype"); the diagnosis ``generation-dtype`` names the one change."""
    # on disk / in the training batch: data_dtype; on a serving path: the dtype the target is served in, or
    # the dtype the project ran the engine in where it had to differ (provenance run_dtype: a float16 contract
    # runs at float32 on CPU, eagle3_conformance.paths.sglang_engine.run_dtype)
    ran = None if cap.stored else cap.provenance.get("run_dtype")
    want = ran or (c.data_dtype if cap.stored else c.serving_dtype)
    said = f"the engine ran {ran} here (the contract serves {c.serving_dtype})" if ran else f"contract says {want}"
    out = []
    for slot, t in (("feature", cap.feature), ("verifier", cap.verifier_last)):
        if t is None:
            continue
        got = dtype_name(t)
        if ran and got == ran and ran != c.serving_dtype:  # the path chose it: the contract's dtype was not served
            w = served_dtype_words(c.serving_dtype, ran)
            out.append(finding("dtype", "skip", cap, slot, c.serving_dtype, got,
                               f"{slot} dtype is {got}: {c.serving_dtype} NOT served here, the path ran the engine in "
                               f"{ran} (on CPU only float32 keeps the losslessness oracle; CONFORMANCE_ENGINE_DTYPE="
                               f"{c.serving_dtype} serves the contract's). {w.title}: {w.evidence[1]}", "K12"))
            continue
        out.append(finding("dtype", "pass" if got == want else "fail", cap, slot, want, got,
                           f"{slot} dtype is {got}; {said}", "K12"))
    disk = cap.provenance.get("on_disk_dtype")
    if disk is not None:
        out.append(finding("dtype", "pass" if disk == c.data_dtype else "fail", cap, "on disk", c.data_dtype, disk,
                           f"hidden states are stored as {disk}; contract says {c.data_dtype}" + (
                               "" if disk == c.data_dtype else f": the generation server ran in {disk}, the contract "
                               f"assumes {c.data_dtype} (init --generation-dtype {disk}, or serve --dtype "
                               f"{c.data_dtype}; docs/speculators-generator.md)"), "K12"))
    for name in ("token_ids", "draft_input_ids"):
        t = getattr(cap, name)
        if t is not None:
            g = dtype_name(t)
            out.append(finding("id_dtype", "pass" if t.dtype == torch.int64 else "fail", cap, name, "int64", g,
                               f"{name} dtype is {g}; expected int64", "K12"))
    return out


@check(CAPTURE, ("K12",), stored=ROW_RMS)
def check_finite(c: Contract, cap: Capture) -> list[Finding]:
    """NaN/Inf rows in any slot (a broken capture or overflow)."""
    out = []
    tensors = [("feature", cap.feature)] + ([("verifier", cap.verifier_last)] if cap.verifier_last is not None else [])
    for name, t in tensors:
        rows = nonfinite_rows(t)
        out.append(finding("finite", "fail" if rows else "pass", cap, name, "all finite",
                           f"non-finite rows {rows[:8]}" if rows else "all finite",
                           f"{len(rows)} rows hold NaN or Inf{_slots_named(c, t) if name == 'feature' else ''}"
                           if rows else "all values finite", "K12"))
    return out


def nonfinite_rows(t: torch.Tensor) -> list[int]:
    """Indices of the rows (last dimension = the hidden size) of ``t`` holding NaN or Inf, ascending."""
    if not t.numel():
        return []
    return (~torch.isfinite(t.float())).any(-1).nonzero().flatten().tolist()


def _slots_named(c: Contract, feature: torch.Tensor) -> str:
    """``" (slot 1 = B_15: rows [7])"``: which aux slots of ``feature`` hold the NaN/Inf rows."""
    parts = []
    for j, s in enumerate(torch.split(feature, c.draft.target_hidden_size, dim=-1)):
        rows = nonfinite_rows(s)
        if rows:
            b = c.aux[j] if j < len(c.aux) else "?"
            parts.append(f"slot {j} = {b}: rows {rows[:8]}")
    return f" ({'; '.join(parts)})" if parts else ""


@check(CAPTURE, ("K8", "K13"), stored=TENSORS)
def check_row_count(c: Contract, cap: Capture) -> list[Finding]:
    """K13: one feature row per row index, and every row index is a token of the sequence."""
    n = int(cap.feature.shape[0])
    T = int(cap.token_ids.shape[0])
    problems = []
    if int(cap.rows.shape[0]) != n:
        problems.append(f"{n} feature rows but {int(cap.rows.shape[0])} row indices")
    if n and (int(cap.rows.min()) < 0 or int(cap.rows.max()) >= T):
        problems.append(f"row indices outside 0..{T - 1}")
    if cap.verifier_last is not None and int(cap.verifier_last.shape[0]) != n:
        problems.append(f"{n} feature rows but {int(cap.verifier_last.shape[0])} verifier rows")
    return [finding("row_count", "fail" if problems else "pass", cap, None, "rows == tokens",
                    "; ".join(problems) or f"{n} rows", "; ".join(problems) or f"{n} rows for {T} tokens", "K13")]


@check(CAPTURE, ("K11", "K13"), emits=("token_ids",), stored=TENSORS)
def check_token_ids_match(c: Contract, cap: Capture) -> list[Finding]:
    """K11/K13: the token ids stored beside the hidden states equal the dataset's input ids."""
    if cap.source_token_ids is None:
        return []
    a, b = cap.token_ids, cap.source_token_ids
    ok = a.shape == b.shape and bool(torch.equal(a.long(), b.long()))
    obs = "equal" if ok else (f"lengths {a.shape[0]} vs {b.shape[0]}" if a.shape != b.shape else
                              f"first difference at token {int((a != b).nonzero()[0])}")
    return [finding("token_ids", "pass" if ok else "fail", cap, None, "stored token_ids == dataset input_ids", obs,
                    "stored token ids match the dataset" if ok else f"stored token ids differ from the dataset ({obs})",
                    "K11")]
