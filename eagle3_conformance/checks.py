"""Pure checks: (contract, capture[, reference]) -> list[Finding].

Every check is a small function with one job; its docstring names the FAULTS.md kind it exists
for. None imports a path adapter. Tensors in, findings out; nothing is modified.

Slot identity is judged by fingerprint: the per-token cosine similarity between a captured slot
and every reference boundary B_0..B_L, F for the same tokens (mean over the rows that are not
excluded by ``norm_bands.exclude_positions``), following REFERENCE.md section 7.3 item 6.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from eagle3_conformance import gates
from eagle3_conformance.capture import Capture
from eagle3_conformance.contract import Contract
from eagle3_conformance.findings import Finding
from eagle3_conformance.notation import Boundary, all_boundaries
from eagle3_conformance.reference import Reference, rms

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def _f(check, status, cap: Capture, slot, expected, observed, message, fault, gate: str = "") -> Finding:
    return Finding(check, status, cap.path, slot, expected, observed, cap.where, message, fault, gate)


#: contract keys of the identity gates (docs/gates.md), named in findings they decide
GATE_NOISE = "gates.identity_noise_deg"
GATE_ROW_FLOOR = "gates.slot_identity_min_cosine"
GATE_CROSS_PATH = "gates.cross_path_min_cosine"


#: below this best cosine a slot is reported as matching no boundary rather than as "being" the
#: nearest one (a wrong reference model or a tensor that is not a boundary at all)
NO_MATCH_COSINE = 0.5


def _slot_label(i: int) -> str:
    return f"slot {i}"


def verifier_rows(c: Contract, cap: Capture) -> torch.Tensor:
    """Token index of each verifier row: ``rows + alignment.target`` for a shifted batch (the
    contract's pairing), ``rows + cap.verifier_offset`` where the path says otherwise."""
    off = c.alignment.target if cap.verifier_offset is None else cap.verifier_offset
    return cap.rows + off


# --- availability / shape / dtype --------------------------------------------------------------


def check_sample_available(c: Contract, cap: Capture) -> list[Finding]:
    """K11/K13: the path produced the sample (speculators skips a sample whose stored token ids
    differ from the dataset's, with only a warning; such skips must be zero)."""
    if cap.unavailable:
        return [_f("sample_available", "fail", cap, None, "sample loads", cap.unavailable,
                   f"the loader produced nothing for this sample: {cap.unavailable}", "K13")]
    return [_f("sample_available", "pass", cap, None, "sample loads", "loaded", "sample loaded", "K13")]


def check_slot_count(c: Contract, cap: Capture) -> list[Finding]:
    """K3/K5: the draft input holds exactly K blocks of target_hidden_size."""
    d, K, W = c.draft.target_hidden_size, c.num_slots, cap.width
    n = W / d
    ok = W % d == 0 and int(n) == K
    obs = int(n) if W % d == 0 else f"{W}/{d} (not a whole number of slots)"
    msg = (f"{K} slots of {d}" if ok else
           f"the draft input holds {obs} slots of {d}; contract says {K}")
    return [_f("slot_count", "pass" if ok else "fail", cap, "feature", K, obs, msg, "K3")]


def check_width(c: Contract, cap: Capture) -> list[Finding]:
    """K5/K6/K7: concatenated width equals K x target_hidden_size, and each slot is d wide."""
    want = c.capture.feature_width
    out = [_f("feature_width", "pass" if cap.width == want else "fail", cap, "feature", want, cap.width,
              f"feature is {cap.width} wide; contract says {c.num_slots} x {c.draft.target_hidden_size} = {want}",
              "K5")]
    if cap.draft_input_width is not None:
        ok = cap.draft_input_width == want
        out.append(_f("draft_input_width", "pass" if ok else "fail", cap, "feature", want,
                      cap.draft_input_width,
                      f"the draft received a {cap.draft_input_width}-wide input; contract says {want}", "K5"))
    if cap.verifier_last is not None:
        vw = int(cap.verifier_last.shape[-1])
        ok = vw == c.target.hidden_size
        out.append(_f("verifier_width", "pass" if ok else "fail", cap, "verifier", c.target.hidden_size, vw,
                      f"verifier slot is {vw} wide; target hidden size is {c.target.hidden_size}", "K6"))
    return out


def check_dtype(c: Contract, cap: Capture) -> list[Finding]:
    """K12: hidden states carry the contract's dtype; token ids are int64."""
    # on disk / in the training batch: data_dtype; on a serving path: the dtype the target is served in
    want = c.data_dtype if cap.path.startswith("training") else c.serving_dtype
    got = str(cap.feature.dtype).replace("torch.", "")
    out = [_f("dtype", "pass" if got == want else "fail", cap, "feature", want, got,
              f"feature dtype is {got}; contract says {want}", "K12")]
    if cap.verifier_last is not None:
        vg = str(cap.verifier_last.dtype).replace("torch.", "")
        out.append(_f("dtype", "pass" if vg == want else "fail", cap, "verifier", want, vg,
                      f"verifier dtype is {vg}; contract says {want}", "K12"))
    disk = cap.provenance.get("on_disk_dtype")
    if disk is not None:
        out.append(_f("dtype", "pass" if disk == c.data_dtype else "fail", cap, "on disk", c.data_dtype, disk,
                      f"hidden states are stored as {disk}; contract says {c.data_dtype}", "K12"))
    for name in ("token_ids", "draft_input_ids"):
        t = getattr(cap, name)
        if t is not None:
            g = str(t.dtype).replace("torch.", "")
            out.append(_f("id_dtype", "pass" if t.dtype == torch.int64 else "fail", cap, name, "int64", g,
                          f"{name} dtype is {g}; expected int64", "K12"))
    return out


def check_finite(c: Contract, cap: Capture) -> list[Finding]:
    """NaN/Inf rows in any slot (a broken capture or overflow)."""
    out = []
    tensors = [("feature", cap.feature)] + ([("verifier", cap.verifier_last)] if cap.verifier_last is not None else [])
    for name, t in tensors:
        bad = (~torch.isfinite(t.float())).any(-1) if t.numel() else torch.zeros(0, dtype=torch.bool)
        rows = bad.nonzero().flatten().tolist()
        out.append(_f("finite", "fail" if rows else "pass", cap, name, "all finite",
                      f"non-finite rows {rows[:8]}" if rows else "all finite",
                      f"{len(rows)} rows hold NaN or Inf" if rows else "all values finite", "K12"))
    return out


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
    return [_f("row_count", "fail" if problems else "pass", cap, None, "rows == tokens",
               "; ".join(problems) or f"{n} rows", "; ".join(problems) or f"{n} rows for {T} tokens", "K13")]


def check_token_ids_match(c: Contract, cap: Capture) -> list[Finding]:
    """K11/K13: the token ids stored beside the hidden states equal the dataset's input ids."""
    if cap.source_token_ids is None:
        return []
    a, b = cap.token_ids, cap.source_token_ids
    ok = a.shape == b.shape and bool(torch.equal(a.long(), b.long()))
    obs = "equal" if ok else (f"lengths {a.shape[0]} vs {b.shape[0]}" if a.shape != b.shape else
                              f"first difference at token {int((a != b).nonzero()[0])}")
    return [_f("token_ids", "pass" if ok else "fail", cap, None, "stored token_ids == dataset input_ids", obs,
               "stored token ids match the dataset" if ok else f"stored token ids differ from the dataset ({obs})",
               "K11")]


# --- fingerprints ------------------------------------------------------------------------------


def _keep_rows(c: Contract, cap_rows: torch.Tensor) -> torch.Tensor:
    """Mask over capture rows that are not excluded positions (``norm_bands.exclude_positions``:
    position 0 carries massive activations that make every boundary look alike)."""
    excl = torch.tensor(sorted(set(c.norm_bands.exclude_positions)), dtype=torch.long)
    return ~torch.isin(cap_rows, excl) if excl.numel() else torch.ones_like(cap_rows, dtype=torch.bool)


def _no_rows(check: str, cap: Capture, slot, fault: str) -> list[Finding]:
    return [_f(check, "skip", cap, slot, None, None,
               "every row is at an excluded position (e.g. only the start token): cannot fingerprint", fault)]


def similarity_profile(slot: torch.Tensor, rows: torch.Tensor, ref: Reference, keep: torch.Tensor) -> torch.Tensor:
    """Mean per-token cosine of ``slot`` ([N, d]) with every reference boundary at ``rows``.

    Returns [L+2] float32 ordered B_0..B_L, F (see :func:`eagle3_conformance.notation.all_boundaries`).
    """
    x = torch.nn.functional.normalize(slot.float()[keep], dim=-1, eps=1e-8)  # [n, d]
    r = ref.unit[:, rows[keep]]  # [L+2, n, d], unit rows
    return (r * x[None]).sum(-1).mean(-1)


def resolvable(ref: Reference, declared: Boundary, rows: torch.Tensor, max_cos: float) -> torch.Tensor:
    """Mask over ``rows`` ([N] token indices) at which the reference itself tells ``declared``
    apart from every other boundary: no other boundary has cosine >= ``max_cos`` with it there.

    Massive-activation tokens (every mid boundary points along the same few dimensions) and runs
    of repeated tokens fail this; they carry no evidence of which boundary a slot holds. Judged
    on the reference's per-token profile only, so it works for a one-row capture (docs/gates.md).
    """
    k = all_boundaries(ref.num_layers).index(declared)
    return ref.neighbour_cosine[k][rows] < max_cos


def identify(slot: torch.Tensor, rows: torch.Tensor, ref: Reference, keep: torch.Tensor) -> tuple[Boundary, float, torch.Tensor]:
    """The reference boundary a slot matches best: (boundary, cosine, full profile)."""
    prof = similarity_profile(slot, rows, ref, keep)
    i = int(prof.argmax())
    return all_boundaries(ref.num_layers)[i], float(prof[i]), prof


@dataclass(frozen=True)
class Verdict:
    """Slot identity of one sample (docs/gates.md): ``status`` is pass, fail or undecidable."""

    status: str
    best: Boundary
    declared_cos: float
    best_cos: float
    runner_cos: float  # best cosine among boundaries other than the declared one
    gap_deg: float  # angle(slot, declared) - angle(slot, best), degrees (0 when best is declared)
    used: int  # resolvable tokens the decision rests on
    excluded: int  # tokens excluded as not resolvable


def judge(declared: Boundary, slot: torch.Tensor, rows: torch.Tensor, ref: Reference, keep: torch.Tensor,
          c: Contract, path: Optional[str] = None) -> Optional[Verdict]:
    """Rank-based slot identity with a precision-noise allowance (docs/gates.md).

    Args:
        slot: [N, d] the captured slot; rows: [N] token indices into ``ref``; keep: [N] bool rows
            not at an excluded position; path: the capture's path, whose production precision sets
            the gates (:meth:`Contract.produced_dtype`; None: serving).

    Returns None when no row is resolvable (nothing to decide on).
    """
    res = keep & resolvable(ref, declared, rows, gates.resolvable_max_cosine(c))
    if not bool(res.any()):
        return None
    prof = similarity_profile(slot, rows, ref, res)
    names = all_boundaries(ref.num_layers)
    di, bi = names.index(declared), int(prof.argmax())
    others = torch.cat([prof[:di], prof[di + 1:]])
    runner = float(others.max()) if others.numel() else -1.0
    d_cos, b_cos = float(prof[di]), float(prof[bi])
    gap = gates.angle_deg(d_cos) - gates.angle_deg(b_cos)
    if bi == di:
        # the best match, but too far from it to be that boundary at all: a foreign tensor
        status = "pass" if d_cos >= gates.row_min_cosine(c, path) else "fail"
    else:
        status = "fail" if gap > gates.identity_noise_deg(c, path) else "undecidable"
    return Verdict(status, names[bi], d_cos, b_cos, runner, gap, int(res.sum()), int(keep.sum() - res.sum()))


def _usable(cap: Capture, d: int) -> bool:
    return cap.feature.shape[0] > 0 and cap.rows.shape[0] == cap.feature.shape[0]


def _undecidable(check: str, cap: Capture, label, declared, v: Optional[Verdict], fault: str) -> Finding:
    if v is None:
        msg = (f"{label}: no token can tell {declared} from its neighbours in the reference (massive-activation "
               "or repeated tokens only): not decided")
        obs = "no resolvable token"
    else:
        msg = (f"{label} matches {v.best} slightly better than {declared} (cos {v.best_cos:.4f} vs "
               f"{v.declared_cos:.4f}, {v.gap_deg:.2f} deg apart), within the precision-noise allowance: not decided")
        obs = f"undecidable ({v.best} by {v.gap_deg:.2f} deg)"
    return _f(check, "skip", cap, label, str(declared), obs, msg, fault)


def check_slot_identity(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """K1/K2: each aux slot is the declared boundary, by fingerprint against the reference.

    Rank-based (docs/gates.md): the declared boundary must be the best match over the resolvable
    tokens; a different best match fails only beyond ``gates.identity_noise_deg``; samples with no
    resolvable token or a difference within the allowance are reported as skip (undecidable).
    """
    d = c.draft.target_hidden_size
    if not _usable(cap, d):
        return [_f("slot_identity", "skip", cap, None, None, None, "no rows to fingerprint", "K2")]
    keep = _keep_rows(c, cap.rows)
    if not bool(keep.any()):
        return _no_rows("slot_identity", cap, None, "K2")
    out = []
    slots = cap.slots(d)
    for i, slot in enumerate(slots):
        declared = c.aux[i] if i < c.num_slots else None
        if slot.shape[-1] != d:
            out.append(_f("slot_identity", "skip", cap, _slot_label(i), str(declared), f"{slot.shape[-1]} wide",
                          f"slot {i} is {slot.shape[-1]} wide, not {d}: cannot fingerprint", "K2"))
            continue
        got, cos, prof = identify(slot, cap.rows, ref, keep)
        if declared is None:
            out.append(_f("slot_identity", "fail", cap, _slot_label(i), "no slot", str(got),
                          f"slot {i} is {got.describe(c.L)} (cos {cos:.4f}); the contract declares only "
                          f"{c.num_slots} slots", "K2"))
            continue
        out.append(_identity_finding("slot_identity", c, cap, _slot_label(i), declared,
                                     judge(declared, slot, cap.rows, ref, keep, c, cap.path), cos, got, "K2"))
    return out


def _identity_finding(check: str, c: Contract, cap: Capture, label: str, declared: Boundary,
                      v: Optional[Verdict], any_cos: float, any_best: Boundary, fault: str) -> Finding:
    who = "verifier slot" if label == "verifier" else label

    def no_match(best: Boundary, cos: float) -> Finding:
        return _f(check, "fail", cap, label, str(declared), "none",
                  f"{who} matches no boundary of the reference (best: {best}, cos {cos:.4f}); contract says "
                  f"{declared}: a reference of another checkpoint, or a tensor that is no residual-stream boundary",
                  fault)

    if v is None or v.status == "undecidable":
        # nothing resolvable (or within the allowance), but a slot matching nothing is still wrong
        return no_match(any_best, any_cos) if any_cos < NO_MATCH_COSINE else _undecidable(check, cap, label, declared, v, fault)
    if v.status == "pass":
        return _f(check, "pass", cap, label, str(declared), str(declared),
                  f"{who} is {declared.describe(c.L)} (cos {v.declared_cos:.4f}, next best {v.runner_cos:.4f}; "
                  f"{v.used} tokens, {v.excluded} not resolvable)", fault)
    if v.best_cos < NO_MATCH_COSINE:
        return no_match(v.best, v.best_cos)
    if v.best == declared:  # the closest boundary, but not close enough to be it
        return _f(check, "fail", cap, label, str(declared), str(declared),
                  f"{who} points toward {declared} (cos {v.declared_cos:.4f}) but is not it: below the floor "
                  f"{GATE_ROW_FLOOR} {gates.row_min_cosine(c, cap.path)} (rows of other tokens, or a tensor derived from "
                  f"{declared})", fault, GATE_ROW_FLOOR)
    return _f(check, "fail", cap, label, str(declared), str(v.best),
              f"{who} is {v.best.describe(c.L)}; contract says {declared} (cos {v.best_cos:.4f} to {v.best}, "
              f"{v.declared_cos:.4f} to {declared}; {v.gap_deg:.1f} deg apart, beyond {GATE_NOISE} "
              f"{gates.identity_noise_deg(c, cap.path):g})", fault, GATE_NOISE)


def check_slot_order(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """K2/K13: the slots hold the declared boundaries in the declared (ascending) order; catches
    blocks that are all present but permuted, which width and band checks cannot see."""
    d = c.draft.target_hidden_size
    if not _usable(cap, d) or cap.width % d or cap.width == 0:
        return [_f("slot_order", "skip", cap, "feature", None, None, "widths do not split into slots", "K2")]
    keep = _keep_rows(c, cap.rows)
    if not bool(keep.any()):
        return _no_rows("slot_order", cap, "feature", "K2")
    got = []
    for i, s in enumerate(cap.slots(d)):
        declared = c.aux[i] if i < c.num_slots else None
        if declared is None:
            got.append(identify(s, cap.rows, ref, keep)[0])
            continue
        v = judge(declared, s, cap.rows, ref, keep, c, cap.path)
        # undecidable: the evidence cannot tell the declared boundary from the best match
        got.append(v.best if v is not None and v.status == "fail" else declared)
    want = c.aux
    ok = got == want
    if ok:
        msg = "slots are in the declared order"
    elif sorted(got, key=Boundary.sort_key) == sorted(want, key=Boundary.sort_key):
        msg = f"blocks are out of order: {[str(g) for g in got]}; contract says {[str(w) for w in want]}"
    else:
        msg = f"slots hold {[str(g) for g in got]}; contract says {[str(w) for w in want]}"
    return [_f("slot_order", "pass" if ok else "fail", cap, "feature", [str(w) for w in want],
               [str(g) for g in got], msg, "K2")]


def check_no_embedding(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """K2: no slot is the embedding output B_0 unless the contract allows it (the seed incident:
    a "fix" that captured the embedding made shapes match and meaning wrong)."""
    if c.capture.allow_embedding:
        return [_f("no_embedding", "skip", cap, None, None, None, "contract allows B_0", "K2")]
    d = c.draft.target_hidden_size
    if not _usable(cap, d):
        return [_f("no_embedding", "skip", cap, None, None, None, "no rows", "K2")]
    keep = _keep_rows(c, cap.rows)
    if not bool(keep.any()):
        return _no_rows("no_embedding", cap, None, "K2")
    emb = ref.boundary(Boundary(0))[cap.rows]
    out = []
    for i, s in enumerate(cap.slots(d)):
        if s.shape[-1] != d:
            continue
        cos = float(torch.nn.functional.cosine_similarity(s.float()[keep], emb[keep], dim=-1).mean())
        got, best_cos, _ = identify(s, cap.rows, ref, keep)
        if best_cos < NO_MATCH_COSINE:
            # matches no boundary (zeros, another checkpoint): the identity checks report it; B_0 is no claim
            out.append(_f("no_embedding", "skip", cap, _slot_label(i), "not B_0", f"cos to B_0 {cos:.4f}",
                          f"slot {i} matches no boundary (best {got}, cos {best_cos:.4f} < {NO_MATCH_COSINE}): "
                          "slot_identity reports what it is", "K2"))
            continue
        bad = got.index == 0 and not got.final
        out.append(_f("no_embedding", "fail" if bad else "pass", cap, _slot_label(i), "not B_0",
                      f"cos to B_0 {cos:.4f}",
                      f"slot {i} is B_0 (embedding output, cos {cos:.4f})" if bad else f"slot {i} is not the embedding",
                      "K2"))
    return out


def check_engine_mapping(c: Contract, cap: Capture) -> list[Finding]:
    """K1/K2: the boundaries the engine resolved from the draft config equal the contract's."""
    if cap.engine_boundaries is None:
        return []
    want = [str(b) for b in c.aux]
    ok = list(cap.engine_boundaries) == want
    return [_f("engine_mapping", "pass" if ok else "fail", cap, None, want, list(cap.engine_boundaries),
               f"engine ids {cap.engine_ids} -> {list(cap.engine_boundaries)}"
               + ("" if ok else f"; contract says {want}"), "K1")]


def check_fc_ran(c: Contract, cap: Capture) -> list[Finding]:
    """K5: the draft's fc actually ran on the aux input (SGLang skips fc silently when the input
    is as wide as the draft's embedding, python/sglang/srt/models/llama_eagle3.py:237-247)."""
    if cap.fc_ran is None:
        return []
    return [_f("fc_ran", "pass" if cap.fc_ran else "fail", cap, "feature", True, cap.fc_ran,
               "the draft's fc ran on the input" if cap.fc_ran else
               f"the draft's fc did not run: a {cap.draft_input_width}-wide input skipped it", "K5")]


def check_fc_shape(c: Contract, cap: Capture) -> list[Finding]:
    """K6: the draft's fc is [draft hidden, K x target_hidden_size] (sized from the target width,
    not the draft width; python/sglang/srt/models/llama_eagle3.py:151-167)."""
    fin, fout = cap.provenance.get("fc_in_features"), cap.provenance.get("fc_out_features")
    if fin is None:
        return []
    want = (c.capture.feature_width, c.draft.hidden_size)
    ok = (fin, fout) == want
    return [_f("fc_shape", "pass" if ok else "fail", cap, "fc", f"in {want[0]}, out {want[1]}",
               f"in {fin}, out {fout}",
               f"draft fc maps {fin} -> {fout}" + ("" if ok else f"; contract says {want[0]} -> {want[1]}"), "K6")]


# --- verifier ------------------------------------------------------------------------------------


def check_verifier_identity(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """K3/K4: the verifier slot is the declared tensor (B_L or F), at the contract's target offset."""
    if cap.verifier_last is None:
        return []
    if cap.verifier_last.shape[-1] != c.target.hidden_size or not cap.feature.shape[0]:
        return [_f("verifier_identity", "skip", cap, "verifier", None, None, "verifier slot not usable", "K4")]
    rows = verifier_rows(c, cap)
    valid = rows < ref.stack.shape[1]
    if not bool(valid.any()):
        return [_f("verifier_identity", "skip", cap, "verifier", None, None, "no rows", "K4")]
    keep = _keep_rows(c, rows[valid])
    if not bool(keep.any()):
        return _no_rows("verifier_identity", cap, "verifier", "K4")
    declared = c.verifier_last.parsed
    x, r = cap.verifier_last[valid], rows[valid]
    any_best, any_cos, _ = identify(x, r, ref, keep)
    return [_identity_finding("verifier_identity", c, cap, "verifier", declared, judge(declared, x, r, ref, keep, c, cap.path),
                              any_cos, any_best, "K4")]


def check_verifier_norm_state(c: Contract, cap: Capture, ref: Reference, tol: float = 0.05) -> list[Finding]:
    """K4: pre/post final-norm state of the verifier slot. A post-norm tensor y satisfies
    rms(y / gamma) ~= 1 (REFERENCE.md section 7.3 item 1); a pre-norm B_L does not."""
    if cap.verifier_last is None or cap.verifier_last.shape[-1] != ref.final_norm_weight.shape[0]:
        return []
    y = cap.verifier_last.float()
    if not y.shape[0]:
        return []
    g = ref.effective_gamma()
    safe = g.abs() > 1e-3
    per_token = rms(y[:, safe] / g[safe])
    r = per_token.median().item()
    # The identity separates F from B_L only if the target's own B_L does not satisfy it too: on
    # a target whose pre-norm tokens all have rms(x/gamma) ~ 1 the magnitudes cannot tell (a
    # false positive found by the kill matrix); verifier_identity then decides by fingerprint.
    last = Boundary(ref.num_layers)
    rows = verifier_rows(c, cap)
    rows = rows[(rows >= 0) & (rows < ref.stack.shape[1])]
    if rows.numel():
        pre = rms(ref.boundary(last)[rows][:, safe] / g[safe])
        if bool(((pre - 1.0).abs() <= tol).float().mean() >= 0.95):
            return [_f("verifier_norm_state", "skip", cap, "verifier", f"{c.verifier_last.norm}-norm",
                       f"median rms(y/gamma) = {r:.3f}",
                       f"this target's own {last} has rms(x/gamma) ~ 1 on these tokens: pre- and post-norm "
                       "cannot be told apart by magnitude (verifier_identity decides)", "K4")]
    # post-norm: every token has rms(y/gamma) = 1 (up to eps and dtype); pre-norm tokens vary
    is_post = bool(((per_token - 1.0).abs() <= tol).float().mean() >= 0.95)
    want_post = c.verifier_last.norm == "post"
    ok = is_post == want_post
    state = "post-norm" if is_post else "pre-norm"
    return [_f("verifier_norm_state", "pass" if ok else "fail", cap, "verifier",
               f"{c.verifier_last.norm}-norm", f"{state} (median rms(y/gamma) = {r:.3f})",
               f"verifier slot is {state} (rms(y/gamma) = {r:.3f}); contract says {c.verifier_last.norm}-norm",
               "K4")]


# --- norm bands ----------------------------------------------------------------------------------


def band_rows(c: Contract, rows: torch.Tensor, x: torch.Tensor, band=None) -> torch.Tensor:
    """Mask of rows that are banded: not an excluded position, not a massive activation.

    A massive activation is a row whose RMS exceeds ``massive_activation_ratio`` times a typical
    RMS: the calibrated band's geometric centre when ``band`` is given (so a one-row decode
    capture is judged against the calibration data, not against itself), else the capture's own
    median (calibration, where no band exists yet)."""
    keep = ~torch.isin(rows, torch.tensor(sorted(set(c.norm_bands.exclude_positions)), dtype=torch.long))
    ratio = c.norm_bands.massive_activation_ratio
    if ratio and bool(keep.any()):
        r = rms(x)
        med = (band.lo * band.hi) ** 0.5 if band is not None and band.lo > 0 else r[keep].median()
        keep &= r <= ratio * med
    return keep


def check_norm_bands(c: Contract, cap: Capture) -> list[Finding]:
    """K4/K12 (and K2 where scales differ): per-slot per-token RMS within the contract's band.
    Uncalibrated bands are reported as skip with observed "uncalibrated", never as pass."""
    if c.norm_bands.status != "calibrated":
        return [_f("norm_band", "skip", cap, None, "calibrated bands", "uncalibrated",
                   "norm bands are uncalibrated: magnitudes are not checked", "K4")]
    d = c.draft.target_hidden_size
    out = []
    named = list(enumerate(cap.slots(d)))
    targets: list[tuple[str, Boundary, torch.Tensor, torch.Tensor]] = [
        (_slot_label(i), c.aux[i], s, cap.rows) for i, s in named if i < c.num_slots and s.shape[-1] == d
    ]
    if cap.verifier_last is not None:
        targets.append(("verifier", c.verifier_last.parsed, cap.verifier_last, verifier_rows(c, cap)))
    for label, b, x, rows in targets:
        band = c.band_for(b)
        if band is None or not x.shape[0]:
            continue
        if x.shape[0] != rows.shape[0]:  # malformed capture: row_count reports it
            out.append(_f("norm_band", "skip", cap, label, [band.lo, band.hi], None,
                          f"{x.shape[0]} rows but {rows.shape[0]} row indices: cannot band", "K4"))
            continue
        keep = band_rows(c, rows, x, band)
        if not bool(keep.any()):
            out.append(_f("norm_band", "skip", cap, label, [band.lo, band.hi], None, "every row is excluded", "K4"))
            continue
        r = rms(x[keep])
        lo, hi = float(r.min()), float(r.max())
        outside = ((r < band.lo) | (r > band.hi)).sum().item()
        ok = outside == 0
        out.append(_f("norm_band", "pass" if ok else "fail", cap, label, [band.lo, band.hi], [lo, hi],
                      f"{label} ({b}) per-token RMS in [{lo:.4g}, {hi:.4g}]"
                      + ("" if ok else f": {outside} rows outside the band [{band.lo:.4g}, {band.hi:.4g}]"),
                      "K4"))
    return out


# --- alignment -----------------------------------------------------------------------------------


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
    scores = {o: float(torch.nn.functional.cosine_similarity(slot.float()[ok], st[i][ok], dim=-1).mean())
              for i, o in enumerate(offsets)}
    return max(scores, key=scores.get), scores


def _alignment(check: str, c: Contract, cap: Capture, label: str, x: torch.Tensor, b: Boundary, ref: Reference,
               declared: int, what: str, fault: str = "K13") -> list[Finding]:
    """Shared by feature and target alignment: the offset at which ``x`` ([N, d]) best matches the
    reference boundary ``b``, judged with the precision-noise allowance (docs/gates.md)."""
    keep = _keep_rows(c, cap.rows)
    ref_b = ref.boundary(b)
    o, scores = _best_offset(x, cap.rows, ref_b, keep, gates.resolvable_max_cosine(c))
    if o is None:
        return [_f(check, "skip", cap, label, declared, None,
                   "no row whose neighbouring tokens the reference tells apart (repeated or excluded tokens): "
                   "a shift cannot be seen", fault)]
    if scores[o] < gates.row_min_cosine(c, cap.path):
        return [_f(check, "skip", cap, label, declared, None,
                   f"{label} is not {b} at any offset (best cos {scores[o]:.4f}): it holds another tensor, so its "
                   "alignment cannot be judged (the identity checks report what it is)", fault)]
    if o != declared and declared in scores:
        gap = gates.angle_deg(scores[declared]) - gates.angle_deg(scores[o])
        if gap <= gates.identity_noise_deg(c, cap.path):
            return [_f(check, "skip", cap, label, declared, f"undecidable (t{o:+d} by {gap:.2f} deg)",
                       f"{what} t{o:+d} fits slightly better than t{declared:+d} ({gap:.2f} deg), within the "
                       "precision-noise allowance: not decided", fault)]
    ok = o == declared
    return [_f(check, "pass" if ok else "fail", cap, label, declared, o,
               f"{what} t{o:+d}" + ("" if ok else f"; contract says t{declared:+d} (cosines by offset "
                                              f"{ {k: round(v, 4) for k, v in scores.items()} })"), fault,
               "" if ok else GATE_NOISE)]


def check_feature_alignment(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """K13: feature rows sit at the tokens the path says (fingerprint shift search over -1..+2,
    using the first slot's declared boundary); catches rows shifted or permuted across requests.
    Rows whose neighbouring tokens the reference cannot tell apart are left out; a best offset
    within the precision-noise allowance of the declared one is undecidable (docs/gates.md)."""
    d = c.draft.target_hidden_size
    if cap.feature.shape[0] < 2 or cap.width < d or cap.rows.shape[0] != cap.feature.shape[0]:
        return [_f("feature_alignment", "skip", cap, "slot 0", c.alignment.feature, None,
                   "fewer than 2 rows: a shift cannot be told apart", "K13")]
    return _alignment("feature_alignment", c, cap, "slot 0", cap.slots(d)[0], c.aux[0], ref,
                      c.alignment.feature, "feature row t is the hidden state of token")


def check_target_alignment(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """K13: the verifier row paired with feature row t is token t + alignment.target."""
    if cap.verifier_last is None:
        return []
    if (cap.verifier_last.shape[0] < 2 or cap.verifier_last.shape[-1] != c.target.hidden_size
            or cap.verifier_last.shape[0] != cap.rows.shape[0]):
        return [_f("target_alignment", "skip", cap, "verifier", c.alignment.target, None, "fewer than 2 rows", "K13")]
    b = c.verifier_last.parsed
    return _alignment("target_alignment", c, cap, "verifier", cap.verifier_last, b, ref,
                      c.alignment.target, "verifier row paired with feature row t is token")


def _offset_equal(check: str, cap: Capture, label: str, got: torch.Tensor, src: torch.Tensor, offset: int, fault: str) -> list[Finding]:
    idx = cap.rows + offset
    v = (idx >= 0) & (idx < src.shape[0])
    if not bool(v.any()):
        return [_f(check, "skip", cap, label, offset, None, "no rows inside the sequence at this offset", fault)]
    bad = (got[v].long() != src[idx[v]].long()).nonzero().flatten()
    ok = bad.numel() == 0
    return [_f(check, "pass" if ok else "fail", cap, label, f"row t pairs with source[t{offset:+d}]",
               "all rows" if ok else f"{bad.numel()} rows differ, first at row {int(bad[0])}",
               f"{label} of row t is source token t{offset:+d}" if ok else
               f"{label} does not pair row t with t{offset:+d}: {bad.numel()} of {int(v.sum())} rows differ", fault)]


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
            return [_f("input_token_alignment", "skip", cap, "input ids", c.alignment.input_token, None,
                       "only the bonus token was accepted: no row pairs with a known token", "K13")]
        cap = _replace(cap, rows=cap.rows[:k], draft_input_ids=cap.draft_input_ids[:k])
    return _offset_equal("input_token_alignment", cap, "input ids", cap.draft_input_ids, cap.token_ids,
                         c.alignment.input_token, "K13")


def check_loss_mask_alignment(c: Contract, cap: Capture) -> list[Finding]:
    """K13: the loss-mask entry paired with feature row t is the dataset's mask at t + alignment.loss_mask."""
    if cap.loss_mask is None or cap.source_loss_mask is None:
        return []
    return _offset_equal("loss_mask_alignment", cap, "loss mask", cap.loss_mask, cap.source_loss_mask,
                         c.alignment.loss_mask, "K13")


def check_position_alignment(c: Contract, cap: Capture) -> list[Finding]:
    """K14: row t gets position id t + offset, advancing by one per row. The offset is
    ``alignment.position`` on the training path (speculators' shift_batch starts positions at 1)
    and ``alignment.serving_position`` on SGLang paths (the draft reuses the target's positions)."""
    if cap.position_ids is None or not cap.position_ids.numel():
        return []
    off = c.alignment.position if cap.path.startswith("training") else c.alignment.serving_position
    want = cap.rows + off
    p = cap.position_ids.long()
    bad = (p != want).nonzero().flatten()
    ok = bad.numel() == 0
    return [_f("position_alignment", "pass" if ok else "fail", cap, None, f"t{off:+d}",
               "all rows" if ok else f"row {int(bad[0])}: {int(p[bad[0]])} != {int(want[bad[0]])}",
               f"positions are t{off:+d}" if ok else
               f"{bad.numel()} rows have the wrong position id (first: row {int(bad[0])} has "
               f"{int(p[bad[0]])}, expected {int(want[bad[0]])})", "K14")]


# --- cross-path ----------------------------------------------------------------------------------


def check_cross_path(c: Contract, a: Capture, b: Capture) -> list[Finding]:
    """K13/K9: two paths give the same feature rows for the same tokens (cosine >= the contract's
    cross_path_min_cosine on every shared token; reports the max abs difference)."""
    where = f"{a.path} vs {b.path} ({a.where} / {b.where})"
    if a.width != b.width:
        return [Finding("cross_path", "fail", f"{a.path}|{b.path}", "feature", a.width, b.width, where,
                        f"widths differ: {a.width} vs {b.width}", "K5")]
    if not torch.equal(a.token_ids[: min(len(a.token_ids), len(b.token_ids))],
                       b.token_ids[: min(len(a.token_ids), len(b.token_ids))]):
        return [Finding("cross_path", "skip", f"{a.path}|{b.path}", "feature", None, None, where,
                        "the two captures are not over the same tokens", "K13")]
    ia = {int(r): i for i, r in enumerate(a.rows)}
    pairs = [(ia[int(r)], j) for j, r in enumerate(b.rows) if int(r) in ia]
    if not pairs:
        return [Finding("cross_path", "skip", f"{a.path}|{b.path}", "feature", None, None, where, "no shared rows", "K13")]
    ai = torch.tensor([p[0] for p in pairs])
    bi = torch.tensor([p[1] for p in pairs])
    d = c.draft.target_hidden_size
    xa, xb = a.feature[ai].float(), b.feature[bi].float()
    cos = torch.stack([torch.nn.functional.cosine_similarity(sa, sb, dim=-1)
                       for sa, sb in zip(xa.split(d, -1), xb.split(d, -1))]).min(0).values
    worst = float(cos.min())
    maxabs = float((xa - xb).abs().max())
    floor = gates.cross_path_min_cosine(c, a.path, b.path)
    ok = worst >= floor
    return [Finding("cross_path", "pass" if ok else "fail", f"{a.path}|{b.path}", "feature",
                    f"cos >= {floor}", f"min cos {worst:.5f}, max |diff| {maxabs:.4g}", where,
                    f"{len(pairs)} shared rows: min per-slot cosine {worst:.5f}, max abs difference {maxabs:.4g}"
                    + ("" if ok else f" (row {int(ai[cos.argmin()])} of {a.path}; floor {GATE_CROSS_PATH})"), "K13",
                    "" if ok else GATE_CROSS_PATH)]


# --- suites --------------------------------------------------------------------------------------

CAPTURE_CHECKS: list[Callable[[Contract, Capture], list[Finding]]] = [
    check_slot_count, check_width, check_dtype, check_finite, check_row_count, check_token_ids_match,
    check_engine_mapping, check_fc_ran, check_fc_shape, check_norm_bands, check_input_token_alignment,
    check_loss_mask_alignment, check_position_alignment,
]
REFERENCE_CHECKS: list[Callable[[Contract, Capture, Reference], list[Finding]]] = [
    check_slot_identity, check_slot_order, check_no_embedding, check_verifier_identity,
    check_verifier_norm_state, check_feature_alignment, check_target_alignment,
]


def run_checks(c: Contract, cap: Capture, ref: Optional[Reference]) -> list[Finding]:
    """All checks on one capture. Without a reference, fingerprint checks are reported as skip."""
    out = check_sample_available(c, cap)
    if cap.unavailable:
        return out
    for chk in CAPTURE_CHECKS:
        out += chk(c, cap)
    if ref is None:
        out.append(_f("slot_identity", "skip", cap, None, None, None,
                      "no reference model: slot identity, order and alignment not checked", "K2"))
        return out
    for chk in REFERENCE_CHECKS:
        out += chk(c, cap, ref)
    return out


def check_engine_version(c: Contract, installed: Optional[str]) -> list[Finding]:
    """K1/K2 version awareness: id rules change between SGLang releases (deepseek_v2's first-id
    rule arrived in 0.5.13; REFERENCE.md section 3.2), so a contract lists the SGLang versions
    it was validated with. An unlisted installed version is reported (skip), never passed."""
    listed = c.engines.sglang_validated
    where = f"sglang {installed or 'not installed'}"
    if not listed:
        return [Finding("engine_version", "skip", "sglang", None, "validated versions listed", installed, where,
                        f"the contract lists no validated SGLang version; installed: {installed}", "K1")]
    ok = installed in listed
    return [Finding("engine_version", "pass" if ok else "skip", "sglang", None, listed, installed, where,
                    f"SGLang {installed} is one of the validated versions {listed}" if ok else
                    f"SGLang {installed} is not among the validated versions {listed}: id rules may differ",
                    "K1")]


def check_vllm_version(c: Contract, installed: Optional[str]) -> list[Finding]:
    """vLLM's id readers differ between releases and runners (vllm-project/vllm#46788, #46973,
    #50170), so a contract served with vLLM names the release its ids were resolved with
    (``engines.vllm.version``). Another installed release is reported (skip), never passed."""
    declared = c.engines.vllm.version if c.engines.vllm is not None else None
    where = f"vllm {installed or 'not installed'}"
    if declared is None:
        return [Finding("engine_version", "skip", "vllm", None, "engines.vllm.version", installed, where,
                        f"the contract declares no vLLM release; installed: {installed}", "K1")]
    ok = installed == declared
    return [Finding("engine_version", "pass" if ok else "skip", "vllm", None, declared, installed, where,
                    f"vLLM {installed} is the release the contract's ids were resolved with" if ok else
                    f"vLLM {installed} is not {declared}, the release the contract names: id readers may differ",
                    "K1")]


def check_accept_length(c: Contract, avg_accept_length: Optional[float], path: str = "sglang-engine") -> list[Finding]:
    """Release gate: the mean accept length (tokens committed per verify step, bonus included:
    SGLang's ``avg_spec_accept_length``) >= ``gates.min_accept_length``. Acceptance is the only
    symptom most field reports had (FAULTS.md); it gates, it does not diagnose.

    Args:
        avg_accept_length: the measured mean (>= 1), or None when nothing was measured.
        path: the path that measured it: ``sglang-engine`` (a real engine's server info, GPU) or
            ``cpu-accept`` (the greedy speculative loop on the SGLang CPU harness).
    """
    floor = c.gates.min_accept_length
    where = "sglang.Engine server info" if path == "sglang-engine" else f"{path}: mean tokens per verify step"
    if floor is None:
        return [Finding("accept_length", "skip", path, None, None, avg_accept_length, where,
                        "the contract sets no gates.min_accept_length: acceptance not gated", "")]
    if avg_accept_length is None:
        return [Finding("accept_length", "fail", path, None, floor, None, where,
                        "no accept length was measured" if path != "sglang-engine" else
                        "the engine reported no avg_spec_accept_length", "")]
    ok = avg_accept_length >= floor
    name = "avg_spec_accept_length" if path == "sglang-engine" else "mean accept length"
    return [Finding("accept_length", "pass" if ok else "fail", path, None, floor, avg_accept_length,
                    where, f"{name} {avg_accept_length:.3f} (floor {floor})", "")]


# --- kill-matrix additions: per-row fingerprint, tensor dtypes, vocab mapping, golden tokens ------


def check_row_fingerprint(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """K13: every non-excluded feature row, slot by slot, is the declared boundary of the token the
    path claims (per-row cosine >= ``gates.slot_identity_min_cosine``, by default from the serving
    dtype's measured per-token noise; docs/gates.md). Catches rows moved across requests or
    documents even when most rows are right (the mean in slot_identity can hide a few). Rows at
    which the reference cannot tell the declared boundary from another are not judged.

    Inputs: ``cap.feature`` [N, K*d], ``cap.rows`` [N] int64 into ``ref.stack`` [L+2, T, d] float32.
    """
    d = c.draft.target_hidden_size
    if not _usable(cap, d) or cap.width != c.capture.feature_width:
        return [_f("row_fingerprint", "skip", cap, "feature", None, None, "widths do not split into the declared slots", "K13")]
    if int(cap.rows.min()) < 0 or int(cap.rows.max()) >= ref.stack.shape[1]:
        return [_f("row_fingerprint", "skip", cap, "feature", None, None, "row indices outside the sequence", "K13")]
    keep = _keep_rows(c, cap.rows)
    if not bool(keep.any()):
        return _no_rows("row_fingerprint", cap, "feature", "K13")
    gate = gates.row_min_cosine(c, cap.path)
    worst, worst_at = 2.0, None
    bad_rows: set[int] = set()
    max_cos = gates.resolvable_max_cosine(c)
    for i, s in enumerate(cap.slots(d)):
        k = keep & resolvable(ref, c.aux[i], cap.rows, max_cos)
        if not bool(k.any()):
            continue
        r = ref.boundary(c.aux[i])[cap.rows[k]]
        cos = torch.nn.functional.cosine_similarity(s.float()[k], r, dim=-1)
        j = int(cos.argmin())
        if float(cos[j]) < worst:
            worst, worst_at = float(cos[j]), (i, int(cap.rows[k][j]))
        bad_rows |= set(cap.rows[k][cos < gate].tolist())
    if worst_at is None:
        return [_f("row_fingerprint", "skip", cap, "feature", None, None,
                   "no row at which the reference tells the declared boundaries from their neighbours "
                   "(massive-activation or repeated tokens only): cannot fingerprint", "K13")]
    ok = not bad_rows
    msg = (f"every row is its token's declared boundary (min cosine {worst:.4f})" if ok else
           f"{len(bad_rows)} rows are not the declared boundary of the token the path claims (worst: slot "
           f"{worst_at[0]} at token {worst_at[1]}, cosine {worst:.4f} < {GATE_ROW_FLOOR} {gate})")
    return [_f("row_fingerprint", "pass" if ok else "fail", cap, "feature", f"per-row cos >= {gate}",
               f"min cos {worst:.4f}" + ("" if ok else f", rows {sorted(bad_rows)[:8]}"), msg, "K13",
               "" if ok else GATE_ROW_FLOOR)]


def check_tensor_dtypes(c: Contract, cap: Capture) -> list[Finding]:
    """K12: per-tensor dtypes declared in ``contract.dtypes`` (hidden, input ids, positions).

    ``dtypes.hidden`` null defers to :func:`check_dtype` (data_dtype / target.dtype)."""
    out = []
    want_h = c.dtypes.hidden
    if want_h is not None:
        got = str(cap.feature.dtype).replace("torch.", "")
        out.append(_f("tensor_dtype", "pass" if got == want_h else "fail", cap, "feature", want_h, got,
                      f"feature dtype is {got}; contract dtypes.hidden says {want_h}", "K12"))
    for name, want in (("draft_input_ids", c.dtypes.input_ids), ("position_ids", c.dtypes.positions)):
        t = getattr(cap, name)
        if t is None:
            continue
        got = str(t.dtype).replace("torch.", "")
        out.append(_f("tensor_dtype", "pass" if got == want else "fail", cap, name, want, got,
                      f"{name} dtype is {got}; contract says {want}", "K12"))
    return out


def mapping_sha256(target_ids: torch.Tensor) -> str:
    """sha256 of int64 little-endian bytes of the absolute target ids ([draft_size] int64)."""
    import hashlib

    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(target_ids.to(torch.int64).numpy()).astype("<i8").tobytes()).hexdigest()


def check_vocab_mapping(c: Contract, d2t: Optional[torch.Tensor], t2d: Optional[torch.Tensor],
                        path: str = "training", where: str = "vocab mapping") -> list[Finding]:
    """K10: the draft-to-target vocab mapping as loaded on one path obeys the contract.

    Args:
        d2t: [draft_size] int64 offsets (target id = i + d2t[i]) as the path holds them, or None
            when the path has no mapping (missing file / no ``d2t`` in the checkpoint).
        t2d: [vocab] bool mask of target ids in the draft vocab, or None (SGLang ignores it).

    Invariants (speculators src/speculators/train/vocab_mapping.py): d2t int64 of length
    ``vocab.draft_size``; ``arange + d2t`` strictly increasing and inside [0, vocab); equal to
    ``t2d.nonzero()``; ``t2d.sum() == draft_size``; ``mapping_sha256`` when declared.
    Skips when the contract declares no ``vocab`` section.
    """
    def f(check, ok, expected, observed, msg):
        return Finding(check, "pass" if ok else "fail", path, "vocab", expected, observed, where, msg, "K10")

    v = c.vocab
    if v is None:
        return [Finding("vocab_mapping", "skip", path, "vocab", None, None, where,
                        "the contract declares no vocab mapping", "K10")]
    out: list[Finding] = []
    if d2t is None:
        ok = not v.d2t_present
        return [f("vocab_mapping", ok, "d2t present" if v.d2t_present else "no d2t", "absent",
                  "no d2t mapping on this path" + ("" if ok else "; contract says it is present (an identity "
                                                    "mapping would be used silently)"))]
    problems = []
    if d2t.dtype != torch.int64:
        problems.append(f"d2t dtype {str(d2t.dtype).replace('torch.', '')}, expected int64")
    if d2t.dim() != 1 or d2t.shape[0] != v.draft_size:
        problems.append(f"d2t shape {list(d2t.shape)}, expected [{v.draft_size}]")
    ids = None
    if not problems:
        ids = d2t.long() if v.d2t_convention == "absolute" else torch.arange(v.draft_size) + d2t.long()
        if ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
            problems.append("target ids (i + d2t[i]) are not strictly increasing")
        if int(ids.min()) < 0 or int(ids.max()) >= v.size:
            problems.append(f"target ids outside [0, {v.size})")
    if t2d is None:
        if v.t2d_present and path == "training":
            problems.append("t2d is missing")
    else:
        if t2d.dim() != 1 or t2d.shape[0] != v.size:
            problems.append(f"t2d shape {list(t2d.shape)}, expected [{v.size}]")
        elif int(t2d.bool().sum()) != v.draft_size:
            problems.append(f"t2d.sum() = {int(t2d.bool().sum())}, expected {v.draft_size}")
        elif ids is not None and not torch.equal(ids, t2d.bool().nonzero().flatten()):
            bad = int((ids != t2d.bool().nonzero().flatten()).nonzero()[0])
            problems.append(f"i + d2t[i] differs from t2d.nonzero() (first at draft id {bad})")
    if v.mapping_sha256 and ids is not None and not problems:
        got = mapping_sha256(ids)
        if got != v.mapping_sha256:
            problems.append(f"mapping sha256 {got[:12]}.. != contract {v.mapping_sha256[:12]}..")
    ok = not problems
    return [f("vocab_mapping", ok, "mapping obeys the contract", "; ".join(problems) or "ok",
              "vocab mapping obeys the contract" if ok else "vocab mapping: " + "; ".join(problems))]


def check_chat_template(c: Contract, template: Optional[str], path: str = "training",
                        where: str = "chat template") -> list[Finding]:
    """K11: the chat template this path renders with hashes to ``tokenizer.chat_template_sha256``."""
    import hashlib

    t = c.tokenizer
    if t is None or t.chat_template_sha256 is None:
        return [Finding("chat_template", "skip", path, None, None, None, where, "no template hash declared", "K11")]
    got = hashlib.sha256((template or "").encode("utf-8")).hexdigest()
    ok = got == t.chat_template_sha256
    return [Finding("chat_template", "pass" if ok else "fail", path, None, t.chat_template_sha256[:12], got[:12], where,
                    "chat template matches the contract" if ok else
                    "chat template differs from the contract's (sha256 mismatch)", "K11")]


def check_golden_tokens(c: Contract, training_ids: Optional[list[int]], serving_ids: Optional[list[int]],
                        path: str = "training", where: str = "golden conversation") -> list[Finding]:
    """K11: the golden conversation tokenizes to ``tokenizer.golden.ids`` on the training side and
    on the serving side (each given as a list of int token ids, or None when that side is not run
    on this path); both sides must also agree with each other."""
    t = c.tokenizer
    if t is None or t.golden is None:
        return [Finding("golden_tokens", "skip", path, None, None, None, where, "no golden conversation declared", "K11")]
    want = list(t.golden.ids)
    out = []
    for side, got in (("training", training_ids), ("serving", serving_ids)):
        if got is None:
            continue
        got = [int(x) for x in got]
        ok = got == want
        if ok:
            msg = f"{side} ids equal the golden ids ({len(want)} tokens)"
        else:
            k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            msg = (f"{side} tokenization differs from the golden ids at token {k} "
                   f"({len(got)} vs {len(want)} tokens; got {got[k:k + 4]}, golden {want[k:k + 4]})")
        out.append(Finding("golden_tokens", "pass" if ok else "fail", path, side, len(want), len(got), where, msg, "K11"))
    return out


REFERENCE_CHECKS.append(check_row_fingerprint)
CAPTURE_CHECKS.append(check_tensor_dtypes)


# --- diagnosis additions: magnitude against the reference, the draft's pre-fc norm ---------------

def _ratio_stats(x: torch.Tensor, r: torch.Tensor) -> dict:
    """Per-token RMS of ``x`` against ``r`` ([n, d] each): median ratio, its p90/p10 spread, and
    the median and p90/p10 spread of ``x``'s own per-token RMS."""
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


def check_magnitude(c: Contract, cap: Capture, ref: Reference, max_ratio: Optional[float] = None) -> list[Finding]:
    """K4/K12: a slot that points the way of its declared boundary (mean cosine >=
    ``gates.slot_identity_min_cosine``) also has its magnitude: the median over tokens of
    ``rms(slot_t) / rms(B_t)`` lies in ``[1/max_ratio, max_ratio]`` (default by serving dtype:
    :func:`eagle3_conformance.gates.magnitude_max_ratio`, 1.1 float32, 3.0 bf16; docs/gates.md).

    Compares with the reference itself, so it needs no calibrated norm bands: it catches a slot
    normalized without its norm weights (per-token RMS 1) and a rescaled slot (FP8 read without
    its scales, a stray factor), which fingerprints cannot see (cosine is scale-free). Slots that
    point elsewhere are skipped: ``slot_identity`` / ``verifier_identity`` report what they are.

    ``observed`` is a dict: ``rms_ratio`` (median slot/reference), ``ratio_spread`` (p90/p10 of
    the per-token ratio: ~1 for a constant rescale), ``slot_rms`` (median per-token RMS of the
    slot: ~1 when normalized without weights), ``slot_rms_spread``, ``tokens``.
    """
    d = c.draft.target_hidden_size
    if not _usable(cap, d):
        return [_f("magnitude", "skip", cap, None, None, None, "no rows to compare", "K4")]
    gate = gates.row_min_cosine(c, cap.path)
    max_ratio = max_ratio if max_ratio is not None else gates.magnitude_max_ratio(c, cap.path)
    want = f"median rms(slot)/rms(reference) in [{1 / max_ratio:.3g}, {max_ratio:.3g}]"
    targets: list[tuple[str, Boundary, torch.Tensor, torch.Tensor]] = [
        (_slot_label(i), c.aux[i], s, cap.rows) for i, s in enumerate(cap.slots(d))
        if i < c.num_slots and s.shape[-1] == d]
    if cap.verifier_last is not None and cap.verifier_last.shape[-1] == c.target.hidden_size \
            and cap.verifier_last.shape[0] == cap.rows.shape[0]:
        targets.append(("verifier", c.verifier_last.parsed, cap.verifier_last, verifier_rows(c, cap)))
    out = []
    T = ref.stack.shape[1]
    for label, b, x, rows in targets:
        valid = (rows >= 0) & (rows < T)
        keep = valid & _keep_rows(c, rows)
        if not bool(keep.any()):
            out.append(_f("magnitude", "skip", cap, label, want, None, "every row is excluded or outside the "
                          "sequence", "K4"))
            continue
        xs, rs = x.float()[keep], ref.boundary(b)[rows[keep]]
        fin = torch.isfinite(xs).all(-1)
        xs, rs = xs[fin], rs[fin]
        if not xs.shape[0]:
            out.append(_f("magnitude", "skip", cap, label, want, None, "no finite rows", "K4"))
            continue
        cos = float(torch.nn.functional.cosine_similarity(xs, rs, dim=-1).mean())
        if cos < gate:
            out.append(_f("magnitude", "skip", cap, label, want, None,
                          f"{label} does not point the way of {b} (cos {cos:.4f}): identity checks report what it "
                          "is", "K4"))
            continue
        st = _ratio_stats(xs, rs)
        if not st:
            out.append(_f("magnitude", "skip", cap, label, want, None, f"{b} has zero RMS on these rows", "K4"))
            continue
        r = st["rms_ratio"]
        ok = 1 / max_ratio <= r <= max_ratio
        msg = (f"{label} ({b}) per-token RMS is {r:.3f}x the reference's (median over {st['tokens']} tokens, "
               f"cos {cos:.4f})")
        if not ok:
            msg += f": the right direction at the wrong magnitude (slot RMS median {st['slot_rms']:.3g})"
        out.append(_f("magnitude", "pass" if ok else "fail", cap, label, want, {**st, "cos": cos}, msg, "K4"))
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
        return [_f("pre_fc_norm", "skip", cap, "fc input", c.draft.pre_fc_norm, None,
                   f"fc input {list(y.shape)} is not the draft input {list(x.shape)}: cannot compare", "K4")]
    xf, yf = x.float(), y.float()
    fin = torch.isfinite(xf).all(-1) & torch.isfinite(yf).all(-1)
    xf, yf = xf[fin], yf[fin]
    if not xf.shape[0]:
        return [_f("pre_fc_norm", "skip", cap, "fc input", c.draft.pre_fc_norm, None, "no finite rows", "K4")]
    d = c.draft.target_hidden_size
    raw = float((yf - xf).norm() / yf.norm().clamp_min(1e-12))
    fits = {"none": raw, "norm_before_fc": _rmsnorm_fit(xf, yf, xf.shape[-1]), "fc_norm": _rmsnorm_fit(xf, yf, d)}
    best = min(fits, key=fits.get)
    got = best if fits[best] <= PRE_FC_FIT_TOL else "other"
    if got == "norm_before_fc" and fits["fc_norm"] <= PRE_FC_FIT_TOL and c.draft.pre_fc_norm == "fc_norm":
        got = "fc_norm"  # K = 1: one slot is the whole concat
    want = c.draft.pre_fc_norm
    ok = got == want
    words = {"none": "the raw aux concat (no pre-fc norm)", "norm_before_fc": "RMSNorm over the whole concat "
             "(norm_before_fc)", "fc_norm": "RMSNorm per slot (fc_norm)", "other": "neither the raw concat nor "
             "its RMSNorm"}
    msg = f"the draft's fc received {words[got]}" + ("" if ok else f"; contract says draft.pre_fc_norm: {want}")
    return [_f("pre_fc_norm", "pass" if ok else "fail", cap, "fc input", want, got, msg, "K4")]


REFERENCE_CHECKS.append(check_magnitude)
CAPTURE_CHECKS.append(check_pre_fc_norm)


# --- hs-connectors transport (issue 13): FP8 payloads and the reader that reads them ------------

GATE_FP8 = "gates.fp8_max_relative_error"

#: hidden-states dtypes hs-connectors' fp8 backend writes (``FP8HiddenStatesConnector``,
#: fp8_hidden_states_connector.py:49-56: ``quantize_tensor_to_fp8`` -> float8_e4m3fn)
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")


def check_transfer_backend(c: Contract, cap: Capture) -> list[Finding]:
    """K12: the hs-connectors reader matches what the file holds (training data only: captures
    whose provenance carries ``payload`` and ``transfer``, set by
    :class:`eagle3_conformance.tools.speculators_loader.TrainingLoader` and check-data's disk scan).

    ``payload`` is the file's header (``speculators_loader.read_payload``: ``dtype`` of
    ``hidden_states``, ``shape`` [T, N, H], ``scales`` shape of ``hidden_states_scales`` or None,
    ``scales_dtype``, ``file``); ``transfer`` the backend that reads it (``file`` / ``fp8``).
    Fails, naming the file:

    - an FP8 payload (float8 ``hidden_states``) read with the ``file`` backend: ``FileTransfer``
      returns the quantised values and speculators' ``CollateFn`` casts them to the trainer dtype without the scale (every row off by its
      per-token factor ``amax/448``, directions kept: cosine-based identity checks cannot see it);
    - float8 ``hidden_states`` without ``hidden_states_scales``: ``FP8Transfer`` then passes them
      through unscaled (hs_connectors/transfer.py:226-227, ``SCALES_KEY not in sample``);
    - scales that are not float32 [T, 1, 1] (what ``quantize_tensor_to_fp8`` returns,
      fp8_utils.py:29-51), or scales beside non-float8 hidden states (plain data with a scales
      tensor beside it: ``FP8Transfer`` would multiply them, ``FileTransfer`` ignores them);
    - plain hidden states where the contract says ``training.transfer: fp8`` (the contract does
      not describe the data);
    - a scale that is zero, negative or not finite (``payload["bad_scale"]``, set from the scales'
      values by :func:`eagle3_conformance.fp8_payload.bad_scale`: ``{"token", "value", "count"}``), naming
      the first token.

    A failure's ``observed["problems"]`` lists the kinds found (``fp8-read-as-file``,
    ``fp8-without-scales``, ``scales-beside-plain``, ``scales-shape``, ``scales-dtype``, ``bad-scale``, ``plain-as-fp8``) for
    the diagnosis to say what to fix.
    """
    p = cap.provenance.get("payload", "absent")
    reader = cap.provenance.get("transfer")
    if reader is None or p == "absent":
        return []
    if p is None:
        return [_f("transfer_backend", "skip", cap, None, None, None,
                   "the hidden-states file header could not be read (sample_available reports why)", "K12")]
    f = p.get("file", "hidden_states file")
    want = f"payload matches the {reader} backend (contract training.transfer: {c.training.transfer})"
    fp8 = p["dtype"] in FP8_DTYPES
    scaled = p.get("scales") is not None
    problems, kinds = [], []

    def problem(kind: str, msg: str) -> None:
        kinds.append(kind)
        problems.append(msg)

    if fp8 and reader == "file":
        problem("fp8-read-as-file",
                f"FP8 data read as plain files: values never rescaled (hs-connectors `file` backend on `fp8` data: "
                f"{f} holds {p['dtype']} hidden_states" + (f" and {p['scales']} hidden_states_scales" if scaled else "")
                + f"; contract training.transfer is {c.training.transfer!r}, the fp8 data needs 'fp8', FP8Transfer)")
    elif fp8 and not scaled:
        problem("fp8-without-scales", f"{f} holds {p['dtype']} hidden_states but no hidden_states_scales: "
                "FP8Transfer passes them through unscaled (values never rescaled)")
    elif scaled and not fp8:
        if reader == "file":
            problem("scales-beside-plain",
                    f"{f} holds plain {p['dtype']} hidden_states with a hidden_states_scales tensor beside them (not "
                    "FP8 data): the `file` backend ignores the scales, FP8Transfer would multiply the plain values "
                    "by them; the file is neither plain nor FP8 payload")
        else:
            problem("scales-beside-plain",
                    f"{f} holds plain {p['dtype']} hidden_states beside hidden_states_scales: FP8Transfer multiplies "
                    "plain values by the scales")
    if scaled and fp8 and reader == "fp8":
        T = p["shape"][0] if p.get("shape") else None
        if p["scales"] != [T, 1, 1]:
            problem("scales-shape", f"{f}: hidden_states_scales is {p['scales']}, expected [T, 1, 1] = [{T}, 1, 1] "
                    "(one scale per token, hs_connectors fp8_utils.py:29-51)")
        if p.get("scales_dtype") != "float32":
            problem("scales-dtype", f"{f}: hidden_states_scales is {p.get('scales_dtype')}, expected float32")
    bs = p.get("bad_scale")
    if scaled and bs:
        problem("bad-scale", f"{f}: hidden_states_scales at token {bs['token']} is {bs['value']:g} ({bs['count']} "
                "token(s) with a scale <= 0 or not finite); quantize_tensor_to_fp8 writes amax/448 clamped "
                "at 1e-12, always > 0 (hs_connectors fp8_utils.py:29-51)")
    if not fp8 and not scaled and reader == "fp8":
        problem("plain-as-fp8", f"{f} holds plain {p['dtype']} hidden_states but the contract says training.transfer: "
                "fp8 (FP8Transfer passes them through; the contract does not describe this data)")
    obs = {"file": f, "dtype": p["dtype"], "scales": p.get("scales"), "reader": reader}
    if problems:
        obs.update(scales_dtype=p.get("scales_dtype"), problems=kinds)
        return [_f("transfer_backend", "fail", cap, None, want, obs, "; ".join(problems), "K12")]
    kind = f"{p['dtype']} with per-token scales" if scaled else f"plain {p['dtype']}"
    return [_f("transfer_backend", "pass", cap, None, want, obs, f"{kind} read with the {reader} backend", "K12")]


CAPTURE_CHECKS.append(check_transfer_backend)


def check_fp8_scale_error(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """K12: per token and slot, the relative error ``||x_t - B_t|| / ||B_t||`` of what the trainer
    receives (FP8 dequantised by ``FP8Transfer``, or plain) against the float32 reference boundary
    must not exceed ``gates.fp8_max_relative_error`` (:func:`eagle3_conformance.gates.fp8_max_relative_error`).

    hs-connectors' fp8 backend quantises the whole [T, N, H] stack of a sample with one scale per
    token shared by all N slots (``amax / 448``, hs_connectors/fp8_utils.py:29-51): a large value in
    one slot (B_L, a massive activation) coarsens the small slots of the same token, down to
    flushing their values to zero. Judged on training captures of FP8 payloads only (provenance
    ``transfer`` and a float8 ``payload``; plain payloads give no finding). Rows at
    ``norm_bands.exclude_positions`` and rows whose reference is zero are not judged; a slot whose
    best-matching reference boundary (:func:`identify`) is not the declared one is skipped: the
    identity checks report what it is (a cosine floor cannot tell: FP8's own error lowers cosine).

    One finding per slot; ``observed``: ``median`` and ``max`` error over tokens, ``token`` (the
    worst token's index), ``zeroed`` (fraction of that token's values that are 0 where the
    reference is not), ``payload`` (fp8 or the stored dtype).
    """
    reader = cap.provenance.get("transfer")
    p = cap.provenance.get("payload") or {}
    if reader is None or p.get("dtype") not in FP8_DTYPES:
        return []
    d = c.draft.target_hidden_size
    if not _usable(cap, d):
        return [_f("fp8_scale_error", "skip", cap, None, None, None, "no rows to compare", "K12")]
    tol = gates.fp8_max_relative_error(c, cap.path)
    kind = "fp8"
    want = f"per-token ||x - B|| / ||B|| <= {tol:g}"
    targets = [(_slot_label(i), c.aux[i], s, cap.rows) for i, s in enumerate(cap.slots(d))
               if i < c.num_slots and s.shape[-1] == d]
    if cap.verifier_last is not None and cap.verifier_last.shape[-1] == c.target.hidden_size \
            and cap.verifier_last.shape[0] == cap.rows.shape[0]:
        targets.append(("verifier", c.verifier_last.parsed, cap.verifier_last, verifier_rows(c, cap)))
    T = ref.stack.shape[1]
    out = []
    for label, b, x, rows in targets:
        valid = (rows >= 0) & (rows < T)
        keep = valid & _keep_rows(c, rows)
        if not bool(keep.any()):
            out.append(_f("fp8_scale_error", "skip", cap, label, want, None, "every row is excluded", "K12"))
            continue
        xs, rs, tok = x.float()[keep], ref.boundary(b)[rows[keep]], rows[keep]
        rn = rs.norm(dim=-1)
        ok = torch.isfinite(xs).all(-1) & (rn > 0)
        xs, rs, tok, rn = xs[ok], rs[ok], tok[ok], rn[ok]
        if not xs.shape[0]:
            out.append(_f("fp8_scale_error", "skip", cap, label, want, None, "no finite rows", "K12"))
            continue
        best, best_cos, _ = identify(x, rows, ref, keep)
        if best != b:
            out.append(_f("fp8_scale_error", "skip", cap, label, want, None,
                          f"{label} matches {best} best (cos {best_cos:.4f}), not {b}: identity checks report what "
                          "it is", "K12"))
            continue
        err = (xs - rs).norm(dim=-1) / rn
        j = int(err.argmax())
        worst = float(err[j])
        zeroed = float(((xs[j] == 0) & (rs[j] != 0)).float().mean())
        obs = {"median": float(err.median()), "max": worst, "token": int(tok[j]), "zeroed": zeroed,
               "payload": kind, "tokens": int(err.numel())}
        good = worst <= tol
        msg = (f"{label} ({b}) relative error vs the reference: median {obs['median']:.4f}, max {worst:.4f} at "
               f"token {obs['token']} (fp8 payload, {reader} backend)")
        if not good:
            msg += (f" > {GATE_FP8} {tol:g}; {zeroed:.0%} of that token's values are zero where the reference is not"
                    + (" (one FP8 scale per token is shared by all slots: a large value in another slot of this "
                       "token coarsens this one)" if reader == "fp8" else " (read without its scales)"))
        out.append(_f("fp8_scale_error", "pass" if good else "fail", cap, label, want, obs, msg, "K12",
                      "" if good else GATE_FP8))
    return out


REFERENCE_CHECKS.append(check_fp8_scale_error)

def check_verifier_present(c: Contract, cap: Capture) -> list[Finding]:
    """K3: training data stores the verifier state the contract declares (``verifier_last``): a
    reader that found no verifier plane (vLLM extraction files with N = K planes, written with
    speculators' launcher ``--no-include-last-layer``) fails naming it. Serving paths carry no
    verifier (nothing to judge). A present verifier returns nothing: ``verifier_identity`` judges it."""
    if not cap.path.startswith("training") or cap.unavailable or cap.verifier_last is not None:
        return []
    planes = cap.provenance.get("planes")
    held = f"{planes} planes" if planes is not None else "no verifier plane"
    return [_f("verifier_present", "fail", cap, "verifier", c.verifier_last.tensor, "missing",
               f"the data holds {held}, all read as the {c.num_slots} aux slots; the contract declares the verifier "
               f"{c.verifier_last.tensor} ({c.verifier_last.norm}-norm) stored after them, and it is missing", "K3")]


CAPTURE_CHECKS.append(check_verifier_present)


# --- production precision (issue 23) -------------------------------------------------------------
# ``production_precision``: is the data's noise against the float32 reference that of the precision the
# contract says it was produced in (``precision.training`` / ``precision.serving``, else ``target.dtype``)?
#
# Why: the identity, row, cross-path, magnitude and FP8 gates are set by the declared production
# precision (:mod:`eagle3_conformance.gates`). Correct data produced in bfloat16 from a float32
# checkpoint (vLLM's and SGLang's ``dtype="auto"`` serve float32 checkpoints in half precision) fails
# the float32 gates on the few tokens where activations jump, and those failures look like faults
# (K13 rows of other tokens, K12 FP8 scaling). This check measures the noise itself, so that the
# report says "produced in lower precision than declared; change this key" instead of a fault kind
# (:func:`eagle3_conformance.diagnose` reads it first).
#
# The statistic: the median, over every resolvable row of every slot whose best-matching boundary is
# the declared one, of the angle between the row and its reference boundary. Measured on
# SmolLM2-135M-Instruct over the 92 corpus items (``/tmp``-free reproduction in docs/gates.md,
# "Production precision"): float32 boundaries stored as bf16 give per-sample, per-depth medians of
# 0.03..0.15 deg; a bf16 forward 0.13..2.23 deg (median 0.64). A median above
# :data:`FLOAT32_MEDIAN_ANGLE_DEG` (0.3 deg, twice the worst float32 case) is not float32 production.
# A median is robust against a minority of moved rows (K13), which leave the other rows exact; a median
# beyond :data:`NOISE_MEDIAN_MAX_DEG` (most rows elsewhere) is no precision's noise and is not judged.
# Only a float32 declaration can be refuted this way (half-precision noise has no upper band that
# separates it from faults); FP8 transport (``training.transfer: fp8``) adds its own noise (median
# relative error 0.026, about 1.5 deg) and is not judged.

#: median per-row angle (degrees) above which data is not float32-produced (see the module docstring)
FLOAT32_MEDIAN_ANGLE_DEG = 0.3
#: above this median the rows are not a precision's noise at all (most rows belong elsewhere: a fault
#: the other checks name): the bf16 per-sample allowance, itself above the 5.24 deg worst bf16 noise measured
NOISE_MEDIAN_MAX_DEG = gates.IDENTITY_NOISE_DEG["bfloat16"]
PRECISION_CHECK = "production_precision"


def precision_key(path: str) -> str:
    """The contract key that states the production precision of ``path``."""
    return "precision.training" if path.startswith("training") else "precision.serving"


def _slot_angles(c: Contract, cap: Capture, ref: Reference) -> list[torch.Tensor]:
    d = c.draft.target_hidden_size
    keep = _keep_rows(c, cap.rows)
    max_cos = gates.resolvable_max_cosine(c)
    pairs: list[tuple[torch.Tensor, torch.Tensor, Boundary, torch.Tensor]] = [
        (s, cap.rows, c.aux[i], keep) for i, s in enumerate(cap.slots(d)) if i < c.num_slots and s.shape[-1] == d]
    if cap.verifier_last is not None and cap.verifier_last.shape[-1] == d:
        vr = verifier_rows(c, cap)
        ok = (vr >= 0) & (vr < ref.stack.shape[1])
        if bool(ok.all()) and cap.verifier_last.shape[0] == vr.shape[0]:
            pairs.append((cap.verifier_last, vr, Boundary.parse(c.verifier_last.tensor), _keep_rows(c, vr)))
    out = []
    for x, rows, b, k in pairs:
        k = k & resolvable(ref, b, rows, max_cos)
        if not bool(k.any()) or identify(x, rows, ref, k)[0] != b:
            continue  # another boundary: a slot fault, not noise (the identity checks say which)
        cos = torch.nn.functional.cosine_similarity(x.float()[k], ref.boundary(b)[rows[k]], dim=-1)
        out.append(torch.rad2deg(torch.acos(cos.clamp(-1.0, 1.0))))
    return out


def check_production_precision(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """The data's noise against the reference is within the declared production precision's.

    Inputs: ``cap.feature`` [N, K*d] (and ``cap.verifier_last`` [N, d]), ``cap.rows`` [N] into
    ``ref.stack`` [L+2, T, d] float32. One finding per capture: fail when the path is declared
    float32 and the median per-row angle exceeds :data:`FLOAT32_MEDIAN_ANGLE_DEG`; the observed
    dict carries ``median_row_angle_deg``, ``declared`` and ``key`` (the contract key to change).
    """
    key = precision_key(cap.path)
    declared = gates.precision(c, cap.path)
    if cap.path.startswith("training") and c.training.transfer == "fp8":
        return [_f(PRECISION_CHECK, "skip", cap, "feature", declared, None,
                   "FP8 transport adds its own noise: production precision not judged (fp8_scale_error judges it)", "K12")]
    if not _usable(cap, c.draft.target_hidden_size) or cap.width != c.capture.feature_width \
            or int(cap.rows.min()) < 0 or int(cap.rows.max()) >= ref.stack.shape[1]:
        return [_f(PRECISION_CHECK, "skip", cap, "feature", declared, None, "rows do not split into the declared slots", "K12")]
    angles = _slot_angles(c, cap, ref)
    if not angles:
        return [_f(PRECISION_CHECK, "skip", cap, "feature", declared, None,
                   "no slot matches its declared boundary on a resolvable row: nothing to measure", "K12")]
    med = float(torch.cat(angles).median())
    obs = {"median_row_angle_deg": round(med, 4), "declared": declared, "key": key}
    if med > NOISE_MEDIAN_MAX_DEG:
        return [_f(PRECISION_CHECK, "skip", cap, "feature", declared, obs,
                   f"median per-row angle to the reference {med:.1f} deg: beyond any precision's noise "
                   f"({NOISE_MEDIAN_MAX_DEG:g} deg); most rows are not their boundary (the other checks say why)", "K12")]
    if declared != "float32" or med <= FLOAT32_MEDIAN_ANGLE_DEG:
        return [_f(PRECISION_CHECK, "pass", cap, "feature", declared, obs,
                   f"median per-row angle to the reference {med:.3f} deg: consistent with {key} {declared}", "K12")]
    return [_f(PRECISION_CHECK, "fail", cap, "feature", declared, obs,
               f"median per-row angle to the reference {med:.3f} deg > {FLOAT32_MEDIAN_ANGLE_DEG} deg (float32 "
               f"production measured <= 0.15 deg): these hidden states were produced in lower precision than "
               f"{key}: float32 says (cosine {math.cos(math.radians(med)):.5f} per row)", "K12", key)]


REFERENCE_CHECKS.append(check_production_precision)


# --- the layer's update without its residual (issue 23) --------------------------------------------
# ``residual_missing``: a slot that is no boundary but the layer's *update*: the captured tensor plus
# the preceding boundary is the declared one (x + B_{k-1} = B_k).
#
# Why: a capture site after a decoder layer's MLP but before the residual add stores the update
# B_k - B_{k-1} instead of the residual stream B_k (vllm-project/vllm#14464; SGLang 0.5.23's Gemma 3
# capture, FAULTS.md). The identity checks see a tensor that matches no boundary, which on every slot at
# once looks like another checkpoint as reference; this check names it from the reference itself:
# mean per-row cosine of ``x + B_{k-1}`` with ``B_k`` at the path's row floor
# (:func:`eagle3_conformance.gates.row_min_cosine`). It judges only a slot that is not its declared
# boundary (another best match, or below the row floor: a slot that is B_k is the residual stream), so it
# returns nothing on correct data.

RESIDUAL_CHECK = "residual_missing"


def _restored(x: torch.Tensor, rows: torch.Tensor, ref: Reference, b: Boundary, keep: torch.Tensor) -> float:
    """Mean per-row cosine of ``x + B_{k-1}`` with ``B_k`` over ``keep`` rows (k = ``b.index`` >= 1)."""
    prev, cur = ref.boundary(Boundary(b.index - 1))[rows[keep]], ref.boundary(b)[rows[keep]]
    return float(torch.nn.functional.cosine_similarity(x.float()[keep] + prev, cur, dim=-1).mean())


def check_residual_missing(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """Each aux slot (and the verifier, when it is declared B_L) that does not match its declared B_k
    but whose sum with B_{k-1} does: fail naming the slot. Inputs as
    :func:`eagle3_conformance.checks.check_row_fingerprint`. Nothing for slots that match."""
    d = c.draft.target_hidden_size
    if not _usable(cap, d) or cap.width != c.capture.feature_width:
        return []
    if int(cap.rows.min()) < 0 or int(cap.rows.max()) >= ref.stack.shape[1]:
        return []
    pairs = [(f"slot {i}", s, cap.rows, c.aux[i]) for i, s in enumerate(cap.slots(d))]
    v = c.verifier_last.parsed
    if cap.verifier_last is not None and not v.final and cap.verifier_last.shape[0] == cap.rows.shape[0]:
        vr = verifier_rows(c, cap)
        if bool((vr < ref.stack.shape[1]).all()):
            pairs.append(("verifier", cap.verifier_last, vr, v))
    floor = gates.row_min_cosine(c, cap.path)
    out = []
    for label, x, rows, b in pairs:
        keep = _keep_rows(c, rows)
        if b.final or b.index < 1 or not bool(keep.any()):
            continue
        best, own = identify(x, rows, ref, keep)[:2]
        if best == b and own >= floor:
            continue  # the residual stream itself
        cos = _restored(x, rows, ref, b, keep)
        if cos >= floor and cos > own:
            out.append(_f(RESIDUAL_CHECK, "fail", cap, label, str(b), f"{b} - B_{b.index - 1}",
                          f"{label} is no boundary, but {label} + B_{b.index - 1} is {b} (mean cosine {cos:.4f}): "
                          f"the layer's update captured without the residual it is added to", "K4"))
    return out


REFERENCE_CHECKS.append(check_residual_missing)
