"""Slot identity by fingerprint: the per-token cosine between a captured slot and every
reference boundary B_0..B_L, F for the same tokens (mean over the rows not excluded by
``norm_bands.exclude_positions``), following REFERENCE.md section 7.3 item 6; the rank-based
verdict with a precision-noise allowance is docs/gates.md's."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Optional

from eagle3_conformance.checks.common import (
    GATE_NOISE,
    GATE_ROW_FLOOR,
    NO_MATCH_COSINE,
    finding,
    keep_rows,
    no_rows,
    slot_label,
    usable,
)
from eagle3_conformance.checks.registry import REFERENCE, check
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


def similarity_profile(slot: torch.Tensor, rows: torch.Tensor, ref: Reference, keep: torch.Tensor) -> torch.Tensor:
    """Mean per-token cosine of ``slot`` ([N, d]) with every reference boundary at ``rows``.

    Returns [L+2] float32 ordered B_0..B_L, F (see :func:`eagle3_conformance.core.notation.all_boundaries`),
    a new tensor. The checks ask for the same profile several times per slot (identity, order, embedding,
    residual, precision, verifier): each is computed once per reference and read back after (keyed by the
    bytes of ``slot``, ``rows`` and ``keep``, so a copy, a view or a changed tensor is judged on its values).
    """
    memo: dict[bytes, torch.Tensor] = ref.__dict__.setdefault("_profile_memo", {})
    key = _profile_key(slot, rows, keep)
    prof = memo.get(key)
    if prof is None:
        x = torch.nn.functional.normalize(slot.float()[keep], dim=-1, eps=1e-8)  # [n, d]
        r = ref.unit[:, rows[keep]]  # [L+2, n, d], unit rows
        prof = memo[key] = (r * x[None]).sum(-1).mean(-1)
    return prof.clone()


def _profile_key(slot: torch.Tensor, rows: torch.Tensor, keep: torch.Tensor) -> bytes:
    """A digest of what a profile depends on besides the reference: the three tensors' dtypes, shapes and bytes."""
    import hashlib

    h = hashlib.blake2b(digest_size=20)
    for t in (slot, rows, keep):
        t = t.detach().cpu().contiguous()
        h.update(f"{t.dtype}{tuple(t.shape)};".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy() if t.numel() else b"")
    return h.digest()


def resolvable(ref: Reference, declared: Boundary, rows: torch.Tensor, max_cos: float) -> torch.Tensor:
    """Mask over ``rows`` ([N] token indices) at which the reference itself tells ``declared``
    apart from every other boundary: no other boundary has cosine >= ``max_cos`` with it there.

    Massive-activation tokens (every mid boundary points along the same few dimensions) and runs
    of repeated tokens fail this; they carry no evidence of which boundary a slot holds. Judged
    on the reference's per-token profile only, so it works for a one-row capture (docs/gates.md).
    """
    k = ref.names.index(declared)
    return ref.neighbour_cosine[k][rows] < max_cos


def identify(slot: torch.Tensor, rows: torch.Tensor, ref: Reference, keep: torch.Tensor) -> tuple[Boundary, float, torch.Tensor]:
    """The reference boundary a slot matches best: (boundary, cosine, full profile)."""
    prof = similarity_profile(slot, rows, ref, keep)
    i = int(prof.argmax())
    return ref.names[i], float(prof[i]), prof


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
    profile: tuple[float, ...] = ()  # the cosine profile over the resolvable tokens, one per ``names``
    names: tuple[str, ...] = ()  # a partial reference's recorded boundaries (the profile's columns); () = B_0..B_L, F


def judge(declared: Boundary, slot: torch.Tensor, rows: torch.Tensor, ref: Reference, keep: torch.Tensor,
          c: Contract, stored: bool = False) -> Optional[Verdict]:
    """Rank-based slot identity with a precision-noise allowance (docs/gates.md).

    Args:
        slot: [N, d] the captured slot; rows: [N] token indices into ``ref``; keep: [N] bool rows
            not at an excluded position.

    Returns None when no row is resolvable (nothing to decide on), or when a partial reference
    (the engine's own records) did not record ``declared``.
    """
    if declared not in ref.names or not _neighbours_recorded(ref, declared):
        return None
    res = keep & resolvable(ref, declared, rows, gates.resolvable_max_cosine(c))
    if not bool(res.any()):
        return None
    prof = similarity_profile(slot, rows, ref, res)
    names = ref.names
    di, bi = names.index(declared), int(prof.argmax())
    others = torch.cat([prof[:di], prof[di + 1:]])
    runner = float(others.max()) if others.numel() else -1.0
    d_cos, b_cos = float(prof[di]), float(prof[bi])
    gap = gates.angle_deg(d_cos) - gates.angle_deg(b_cos)
    if bi == di:
        # the best match, but too far from it to be that boundary at all: a foreign tensor
        status = "pass" if d_cos >= gates.row_min_cosine(c, stored) else "fail"
    else:
        status = "fail" if gap > gates.identity_noise_deg(c, stored) else "undecidable"
    return Verdict(status, names[bi], d_cos, b_cos, runner, gap, int(res.sum()), int(keep.sum() - res.sum()),
                   tuple(prof.tolist()), tuple(str(n) for n in names) if ref.partial else ())


def profile_record(prof, tokens: int, over: str, names=None) -> dict[str, Any]:
    """The JSON record of a cosine profile (:attr:`eagle3_conformance.core.findings.Finding.profile`):
    ``{"cosine": [floats, 4 decimals, one per boundary: B_0..B_L, F], "tokens": tokens, "over": over}``,
    plus ``"boundaries"`` (the names of the columns) when ``names`` is given by a partial reference (the
    engine's own records hold only the boundaries the checks need, docs/engine-reference.md)."""
    cos = [round(float(x), 4) for x in prof]
    rec: dict[str, Any] = {"cosine": cos, "tokens": int(tokens), "over": over}
    if names is not None and len(names) == len(cos):
        rec["boundaries"] = [str(n) for n in names]
    return rec


def _partial_names(ref: Reference):
    """The reference's boundary names when it is partial (they then label the profile's columns), else None."""
    return ref.names if ref.partial else None


def _neighbours_recorded(ref: Reference, declared: Boundary) -> bool:
    """A partial reference decides a slot only when it also holds the declared boundary's neighbours
    B_{k-1} and B_{k+1}: a slot holding any unrecorded boundary then meets a recorded one between it
    and the declared one, which it matches better (measured on SmolLM2 and Gemma-3-270M,
    docs/engine-reference.md), so it fails or is undecidable, never passes."""
    if not ref.partial or declared.final:
        return True
    near = [Boundary(k) for k in (declared.index - 1, declared.index + 1) if 0 <= k <= ref.num_layers]
    return all(b in ref.names for b in near)


def _undecidable(check: str, cap: Capture, label, declared, v: Optional[Verdict], fault: str) -> Finding:
    if v is None:
        msg = (f"{label}: no token can tell {declared} from its neighbours in the reference (massive-activation "
               "or repeated tokens only): not decided")
        obs = "no resolvable token"
    else:
        msg = (f"{label} matches {v.best} slightly better than {declared} (cos {v.best_cos:.4f} vs "
               f"{v.declared_cos:.4f}, {v.gap_deg:.2f} deg apart), within the precision-noise allowance: not decided")
        obs = f"undecidable ({v.best} by {v.gap_deg:.2f} deg)"
    return finding(check, "skip", cap, label, str(declared), obs, msg, fault)


@check(REFERENCE, ("K1", "K2", "K4", "K5", "K13"), gates=(GATE_NOISE, GATE_ROW_FLOOR))
def check_slot_identity(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """K1/K2: each aux slot is the declared boundary, by fingerprint against the reference.

    Rank-based (docs/gates.md): the declared boundary must be the best match over the resolvable
    tokens; a different best match fails only beyond ``gates.identity_noise_deg``; samples with no
    resolvable token or a difference within the allowance are reported as skip (undecidable).
    """
    d = c.draft.target_hidden_size
    if not usable(cap, d):
        return [finding("slot_identity", "skip", cap, None, None, None, "no rows to fingerprint", "K2")]
    keep = keep_rows(c, cap.rows)
    if not bool(keep.any()):
        return no_rows("slot_identity", cap, None, "K2")
    out = []
    slots = cap.slots(d)
    for i, slot in enumerate(slots):
        declared = c.aux[i] if i < c.num_slots else None
        if slot.shape[-1] != d:
            out.append(finding("slot_identity", "skip", cap, slot_label(i), str(declared), f"{slot.shape[-1]} wide",
                               f"slot {i} is {slot.shape[-1]} wide, not {d}: cannot fingerprint", "K2"))
            continue
        got, cos, prof = identify(slot, cap.rows, ref, keep)
        if declared is None:
            out.append(replace(finding("slot_identity", "fail", cap, slot_label(i), "no slot", str(got),
                                       f"slot {i} is {got.describe(c.L)} (cos {cos:.4f}); the contract declares "
                                       f"only {c.num_slots} slots", "K2"),
                               profile=profile_record(prof, int(keep.sum()), "all kept tokens", _partial_names(ref))))
            continue
        out.append(identity_finding("slot_identity", c, cap, slot_label(i), declared,
                                     judge(declared, slot, cap.rows, ref, keep, c, cap.stored), cos, got, "K2",
                                     profile_record(prof, int(keep.sum()), "all kept tokens", _partial_names(ref))))
    return scanned(out, ref)


def scanned(out: list[Finding], ref: Reference) -> list[Finding]:
    """With a partial reference (the engine's own records), every identity finding says which
    boundaries the scan had: a slot is matched against those only, so a slot holding an unrecorded
    boundary is named by its nearest recorded one (a fail, or undecidable: never a pass, since a
    pass needs the declared boundary to be the best match AND within the per-row cosine floor)."""
    if not ref.partial:
        return out
    had = ", ".join(map(str, ref.names))
    return [replace(f, message=f"{f.message} [scanned the {ref.source} reference's recorded boundaries: {had}]",
                    extra={**f.extra, "reference": ref.source, "scanned": [str(b) for b in ref.names]})
            for f in out]


def identity_finding(check: str, c: Contract, cap: Capture, label: str, declared: Boundary,
                     v: Optional[Verdict], any_cos: float, any_best: Boundary, fault: str,
                     any_profile: Optional[dict[str, Any]] = None) -> Finding:
    """The finding of one identity verdict ``v`` (None: no resolvable token), carrying the
    profile it rested on (``v.profile`` over the resolvable tokens, else ``any_profile`` over
    all kept tokens) as :attr:`eagle3_conformance.core.findings.Finding.profile`."""
    f = _identity_finding(check, c, cap, label, declared, v, any_cos, any_best, fault)
    if v is not None and v.profile:
        return replace(f, profile=profile_record(v.profile, v.used, "resolvable tokens", v.names or None))
    return replace(f, profile=any_profile) if any_profile is not None else f


def _identity_finding(check: str, c: Contract, cap: Capture, label: str, declared: Boundary,
                      v: Optional[Verdict], any_cos: float, any_best: Boundary, fault: str) -> Finding:
    who = "verifier slot" if label == "verifier" else label

    def no_match(best: Boundary, cos: float) -> Finding:
        return finding(check, "fail", cap, label, str(declared), "none",
                       f"{who} matches no boundary of the reference (best: {best}, cos {cos:.4f}); contract says "
                       f"{declared}: a reference of another checkpoint, or a tensor that is no residual-stream boundary",
                       fault)

    if v is None or v.status == "undecidable":
        # nothing resolvable (or within the allowance), but a slot matching nothing is still wrong
        return no_match(any_best, any_cos) if any_cos < NO_MATCH_COSINE else _undecidable(check, cap, label, declared, v, fault)
    if v.status == "pass":
        return finding(check, "pass", cap, label, str(declared), str(declared),
                       f"{who} is {declared.describe(c.L)} (cos {v.declared_cos:.4f}, next best {v.runner_cos:.4f}; "
                       f"{v.used} tokens, {v.excluded} not resolvable)", fault)
    if v.best_cos < NO_MATCH_COSINE:
        return no_match(v.best, v.best_cos)
    if v.best == declared:  # the closest boundary, but not close enough to be it
        return finding(check, "fail", cap, label, str(declared), str(declared),
                       f"{who} points toward {declared} (cos {v.declared_cos:.4f}) but is not it: below the floor "
                       f"{GATE_ROW_FLOOR} {gates.row_min_cosine(c, cap.stored)} (rows of other tokens, or a tensor derived from "
                       f"{declared})", fault, GATE_ROW_FLOOR)
    return finding(check, "fail", cap, label, str(declared), str(v.best),
                   f"{who} is {v.best.describe(c.L)}; contract says {declared} (cos {v.best_cos:.4f} to {v.best}, "
                   f"{v.declared_cos:.4f} to {declared}; {v.gap_deg:.1f} deg apart, beyond {GATE_NOISE} "
                   f"{gates.identity_noise_deg(c, cap.stored):g})", fault, GATE_NOISE)


@check(REFERENCE, ("K2", "K13"))
def check_slot_order(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """K2/K13: the slots hold the declared boundaries in the declared (ascending) order; catches
    blocks that are all present but permuted, which width and band checks cannot see."""
    d = c.draft.target_hidden_size
    if not usable(cap, d) or cap.width % d or cap.width == 0:
        return [finding("slot_order", "skip", cap, "feature", None, None, "widths do not split into slots", "K2")]
    keep = keep_rows(c, cap.rows)
    if not bool(keep.any()):
        return no_rows("slot_order", cap, "feature", "K2")
    got = []
    for i, s in enumerate(cap.slots(d)):
        declared = c.aux[i] if i < c.num_slots else None
        if declared is None:
            got.append(identify(s, cap.rows, ref, keep)[0])
            continue
        v = judge(declared, s, cap.rows, ref, keep, c, cap.stored)
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
    return scanned([finding("slot_order", "pass" if ok else "fail", cap, "feature", [str(w) for w in want],
                            [str(g) for g in got], msg, "K2")], ref)


@check(REFERENCE, ("K2",))
def check_no_embedding(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """K2: no slot is the embedding output B_0 unless the contract allows it (the seed incident:
    a "fix" that captured the embedding made shapes match and meaning wrong)."""
    if c.capture.allow_embedding:
        return [finding("no_embedding", "skip", cap, None, None, None, "contract allows B_0", "K2")]
    d = c.draft.target_hidden_size
    if not usable(cap, d):
        return [finding("no_embedding", "skip", cap, None, None, None, "no rows", "K2")]
    keep = keep_rows(c, cap.rows)
    if not bool(keep.any()):
        return no_rows("no_embedding", cap, None, "K2")
    emb = ref.boundary(Boundary(0))[cap.rows]
    out = []
    for i, s in enumerate(cap.slots(d)):
        if s.shape[-1] != d:
            continue
        cos = float(torch.nn.functional.cosine_similarity(s.float()[keep], emb[keep], dim=-1).mean())
        got, best_cos, _ = identify(s, cap.rows, ref, keep)
        if best_cos < NO_MATCH_COSINE:
            # matches no boundary (zeros, another checkpoint): the identity checks report it; B_0 is no claim
            out.append(finding("no_embedding", "skip", cap, slot_label(i), "not B_0", f"cos to B_0 {cos:.4f}",
                               f"slot {i} matches no boundary (best {got}, cos {best_cos:.4f} < {NO_MATCH_COSINE}): "
                               "slot_identity reports what it is", "K2"))
            continue
        bad = got.index == 0 and not got.final
        out.append(finding("no_embedding", "fail" if bad else "pass", cap, slot_label(i), "not B_0",
                           f"cos to B_0 {cos:.4f}",
                           f"slot {i} is B_0 (embedding output, cos {cos:.4f})" if bad else f"slot {i} is not the embedding",
                           "K2"))
    return out
