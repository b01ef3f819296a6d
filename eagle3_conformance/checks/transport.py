"""hs-connectors transport (issue 13): FP8 payloads and the reader that reads them; the
relative error of what the trainer receives against the reference."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eagle3_conformance.checks.common import finding, keep_rows, slot_label, usable, verifier_rows
from eagle3_conformance.checks.identity import identify
from eagle3_conformance.checks.registry import CAPTURE, REFERENCE, TENSORS, check
from eagle3_conformance.contract import Contract
from eagle3_conformance.core import gates
from eagle3_conformance.core.capture import Capture
from eagle3_conformance.core.findings import Finding

if TYPE_CHECKING:
    import torch

    from eagle3_conformance.reference import Reference
else:  # imported at first use: the package loads without torch (core installs)
    from eagle3_conformance.environment.torch_env import lazy_torch as torch

GATE_FP8 = "gates.fp8_max_relative_error"


#: hidden-states dtypes hs-connectors' fp8 backend writes (``FP8HiddenStatesConnector``,
#: fp8_hidden_states_connector.py:49-56: ``quantize_tensor_to_fp8`` -> float8_e4m3fn)
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")


def _payload_problems(c: Contract, p: dict, reader: str, f: str) -> list[tuple[str, str]]:
    """(kind, sentence) of every way the payload ``p`` of file ``f`` and the ``reader`` backend
    disagree (see :func:`check_transfer_backend`); empty when they agree."""
    fp8 = p["dtype"] in FP8_DTYPES
    scaled = p.get("scales") is not None
    out: list[tuple[str, str]] = []

    def problem(kind: str, msg: str) -> None:
        out.append((kind, msg))

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
    return out


@check(CAPTURE, ("K12",), stored=TENSORS)
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
      values by :func:`eagle3_conformance.tools.shared.fp8_payload.bad_scale`: ``{"token", "value", "count"}``), naming
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
        return [finding("transfer_backend", "skip", cap, None, None, None,
                        "the hidden-states file header could not be read (sample_available reports why)", "K12")]
    f = p.get("file", "hidden_states file")
    want = f"payload matches the {reader} backend (contract training.transfer: {c.training.transfer})"
    scaled = p.get("scales") is not None
    found = _payload_problems(c, p, reader, f)
    kinds, problems = [k for k, _ in found], [m for _, m in found]
    obs = {"file": f, "dtype": p["dtype"], "scales": p.get("scales"), "reader": reader}
    if problems:
        obs.update(scales_dtype=p.get("scales_dtype"), problems=kinds)
        return [finding("transfer_backend", "fail", cap, None, want, obs, "; ".join(problems), "K12")]
    kind = f"{p['dtype']} with per-token scales" if scaled else f"plain {p['dtype']}"
    return [finding("transfer_backend", "pass", cap, None, want, obs, f"{kind} read with the {reader} backend", "K12")]


@check(REFERENCE, ("K12",), gates=(GATE_FP8,))
def check_fp8_scale_error(c: Contract, cap: Capture, ref: Reference) -> list[Finding]:
    """K12: per token and slot, the relative error ``||x_t - B_t|| / ||B_t||`` of what the trainer
    receives (FP8 dequantised by ``FP8Transfer``, or plain) against the float32 reference boundary
    must not exceed ``gates.fp8_max_relative_error`` (:func:`eagle3_conformance.core.gates.fp8_max_relative_error`).

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
    if not usable(cap, d):
        return [finding("fp8_scale_error", "skip", cap, None, None, None, "no rows to compare", "K12")]
    tol = gates.fp8_max_relative_error(c, cap.stored)
    kind = "fp8"
    want = f"per-token ||x - B|| / ||B|| <= {tol:g}"
    targets = [(slot_label(i), c.aux[i], s, cap.rows) for i, s in enumerate(cap.slots(d))
               if i < c.num_slots and s.shape[-1] == d]
    if cap.verifier_last is not None and cap.verifier_last.shape[-1] == c.target.hidden_size \
            and cap.verifier_last.shape[0] == cap.rows.shape[0]:
        targets.append(("verifier", c.verifier_last.parsed, cap.verifier_last, verifier_rows(c, cap)))
    T = ref.stack.shape[1]
    out = []
    for label, b, x, rows in targets:
        valid = (rows >= 0) & (rows < T)
        keep = valid & keep_rows(c, rows)
        if not bool(keep.any()):
            out.append(finding("fp8_scale_error", "skip", cap, label, want, None, "every row is excluded", "K12"))
            continue
        xs, rs, tok = x.float()[keep], ref.boundary(b)[rows[keep]], rows[keep]
        rn = rs.norm(dim=-1)
        ok = torch.isfinite(xs).all(-1) & (rn > 0)
        xs, rs, tok, rn = xs[ok], rs[ok], tok[ok], rn[ok]
        if not xs.shape[0]:
            out.append(finding("fp8_scale_error", "skip", cap, label, want, None, "no finite rows", "K12"))
            continue
        best, best_cos, _ = identify(x, rows, ref, keep)
        if best != b:
            out.append(finding("fp8_scale_error", "skip", cap, label, want, None,
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
        out.append(finding("fp8_scale_error", "pass" if good else "fail", cap, label, want, obs, msg, "K12",
                           "" if good else GATE_FP8))
    return out
