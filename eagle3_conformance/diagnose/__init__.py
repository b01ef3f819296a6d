"""Diagnosis: read every finding of a run and name the fault behind them, with the evidence and the fix.

The checks judge one property of one slot of one sample each; a single fault usually fails many
of them at once (ids read under the other convention fail ``slot_identity`` on every slot,
``slot_order``, ``row_fingerprint`` and ``feature_alignment``). :func:`diagnose` reads the
structured fields of all findings of a run (``check``, ``status``, ``path``, ``slot``,
``expected``, ``observed``; never the message prose), recognises the pattern each fault-kinds.md kind
leaves, and says what happened and what to change, with the ids to write taken from
:func:`eagle3_conformance.engine_ids.boundaries_to_tool` (the library behind ``eagle3-conformance translate``).

Patterns, per path, in this order (a finding explained by one pattern is not reused by a later one):

====================  =====  ============================================================================
kind                  fault  what the findings show
====================  =====  ============================================================================
serving-dtype         --     a serving path's hidden states are another dtype than precision.serving: the
                             target was served in another --dtype (an input problem: the key or the flag,
                             in every direction; it claims the precision noise of a lower dtype)
one-slot-input        K5/K7/ the draft got 1 x d instead of K x d (``draft_input_width``, ``slot_count``,
                      K9     ``fc_ran``); slot 0's identity tells F (no-aux fallback, K5), the first aux
                             slot (a d-wide side buffer, K7) or no boundary (the draft's own states, K9)
other-model-width     K6     every stored slot is w wide where the target's d is not w (the verifier
                             slot's width; the feature a whole number of w-wide slots): another model's
                             hidden states, not a slot count
fc-slot-count         K6     the draft's fc reads k x d where the contract's K slots need K x d (k != K): the
                             engine counted the slots from another key than the ids (R41: speculators' top-level
                             ids, SGLang's nested-key count, default 3)
slot-count            K3     fewer slots than declared; the declared B_L is the one missing
decode-rows-padded    K13    after a partial accept, accepted tokens get zero padding rows (``verified_rows``; R43)
decode-rows-misaligned K9    after a partial accept, accepted tokens get other tokens' or requests' verified
                             rows (``verified_rows``; R52)
mtp-input-side        K4     an MTP head's one slot is F where the contract states B_L, or the reverse (R49)
embedding-for-last    K2     slot 0 is B_0 and every later slot (and the verifier) holds the boundary
                             declared one slot earlier: the embedding was captured in place of B_L
engine-default        K1     the aux slots are the engine's default layers (2, L//2, L-3), not the declared
convention-shift      K2     every aux slot is B_{k+1} (or B_{k-1}) for a declared B_k
slots-permuted        K2     the declared boundaries, in another order
slot-off              K2/K1  some slots hold another boundary (one off: K2; further: K1)
reference-mismatch    --     no slot matches any boundary: the reference is another checkpoint (an input
                             problem, not a fault-kinds.md kind)
not-a-boundary        K4     a slot matches no boundary while others do (a layer update without its
                             residual, a partial sum)
verifier-norm-state   K4     the verifier slot is F where B_L is declared, or the reverse
magnitude             K4/K12 a slot points the right way at the wrong magnitude (normalized without its
                             weights: K4; rescaled by a constant: K12)
fp8-transport         K12    hs-connectors FP8 data read without its scales (the `file` backend, or no
                             hidden_states_scales), or FP8's shared per-token scale coarsening a slot
pre-fc-norm           K4     the fc input lacks (or has) the pre-fc norm the contract declares
rows-misassigned      K13    slot identity holds on average but individual rows belong to other tokens
hidden-without-residual K4   a slot matches no boundary but slot + B_{k-1} is its declared B_k: the
                             layer's update captured before the residual add
verifier-slot-off     K3     the verifier slot holds another boundary than the declared B_L / F (the
                             embedding B_0, a mid layer) or none
verifier-missing      K3     the data stores only the aux planes (vLLM extraction files with N = K); the
                             declared verifier is missing
generation-dtype      --     the data is stored in another dtype than data_dtype while every slot holds its
                             declared boundary: the generation server ran another --dtype than the contract
                             assumes (an input problem: the key or the flag to change; docs/speculators-generator.md)
final-norm-in-aux     K4     an aux slot holds F (the final norm's output) where a pre-norm B_k is declared
                             (transformers' output_hidden_states[L] is F; R-field reports, issue 37)
production-precision  --     the data's noise against the reference is that of a lower precision than the
                             contract's precision block declares (an input problem: the contract key to
                             change, not a fault-kinds.md kind); it claims the failures of the precision gates
draft-accepts-nothing --     the draft's boundary conforms (no boundary check failed) but it accepts almost
                             nothing (``draft_acceptance``): the cause lies after the boundary (its d2t/t2d,
                             its weights, the shared embedding or lm_head); ``draft_vocab`` says which
draft-vocab-mapping   K10    the served draft checkpoint's d2t/t2d or lm_head contradict the target's
                             vocabulary or the contract (``draft_vocab``), acceptance not measured or passing
====================  =====  ============================================================================

Diagnoses found on several paths with the same evidence and fix are merged into one that lists
the paths.

The package mirrors ``checks/``: each rule lives next to the evidence rules of the checks whose
failures it reads (:mod:`.shape`, :mod:`.identity`, :mod:`.residual`, :mod:`.verifier`,
:mod:`.verified_rows`, :mod:`.row_fingerprint`, :mod:`.transport`, :mod:`.magnitude`,
:mod:`.draft_fc`, :mod:`.precision`, :mod:`.acceptance`); :mod:`.base` holds the catalogue, :class:`Diagnosis` and the
per-path view of the findings, :mod:`.fixes` the ids to write. This module runs the rules in the
order of the table above (:data:`_RULES`).
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

from eagle3_conformance.contract import Contract
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.diagnose.acceptance import _accepts_nothing, _draft_vocab
from eagle3_conformance.diagnose.base import KINDS, Diagnosis, _expand, _PathView
from eagle3_conformance.diagnose.draft_fc import _pre_fc_norm
from eagle3_conformance.diagnose.fixes import Translate, _Fixer, translate_ids
from eagle3_conformance.diagnose.identity import (
    _convention_shift,
    _embedding_for_last,
    _engine_default,
    _final_norm_in_aux,
    _loose_match,
    _mtp_input_side,
    _no_boundary,
    _permuted,
    _slot_off,
)
from eagle3_conformance.diagnose.magnitude import _magnitude
from eagle3_conformance.diagnose.precision import (
    _generation_dtype,
    _production_precision,
    _serving_dtype,
    used_precision,
)
from eagle3_conformance.diagnose.residual import _without_residual
from eagle3_conformance.diagnose.row_fingerprint import _rows_misassigned
from eagle3_conformance.diagnose.shape import (
    _fc_slot_count,
    _one_slot_input,
    _other_width,
    _slot_count,
    _verifier_missing,
    _verifier_plane_read_as_aux,
)
from eagle3_conformance.diagnose.transport import _fp8_transport
from eagle3_conformance.diagnose.verified_rows import _decode_rows
from eagle3_conformance.diagnose.verifier import _verifier_other, _verifier_state

__all__ = ["KINDS", "Diagnosis", "Translate", "diagnose", "explained_by", "merge_diagnoses", "path_diagnoses",
           "translate_ids", "used_precision", "_Fixer"]


_RULES = (_serving_dtype, _production_precision, _one_slot_input, _other_width, _fc_slot_count, _verifier_plane_read_as_aux,
          _slot_count, _verifier_missing, _decode_rows, _mtp_input_side, _embedding_for_last, _final_norm_in_aux,
          _engine_default, _convention_shift, _permuted, _without_residual, _no_boundary, _slot_off, _loose_match,
          _verifier_state, _verifier_other, _fp8_transport, _magnitude, _pre_fc_norm, _rows_misassigned,
          _generation_dtype, _accepts_nothing, _draft_vocab)


# --- entry ----------------------------------------------------------------------------------------


def diagnose(contract: Contract, findings: Iterable[Any], *, translate: Optional[Translate] = None) -> list[Diagnosis]:
    """Name the faults behind the findings of one run (:func:`merge_diagnoses` of
    :func:`path_diagnoses`).

    Args:
        contract: the contract the findings were judged against.
        findings: :class:`eagle3_conformance.core.findings.Finding` objects or their JSON dicts (a report file);
            a dict with ``count`` (a pass entry folded by ``--json-passes counts``,
            :func:`eagle3_conformance.report._pass_counts`) weighs as ``count`` findings.
        translate: ``(tool, boundaries, contract) -> ToolIds`` for the ids to write (default
            :func:`translate_ids`, i.e. :func:`eagle3_conformance.engine_ids.boundaries_to_tool`).

    Returns:
        Diagnoses, most fundamental first (width and count, then slot identity, verifier,
        magnitude, pre-fc norm, rows); the same diagnosis on several paths is merged into one.
        Empty when nothing failed or no pattern is recognised (the failing checks still say what
        failed).
    """
    return merge_diagnoses(path_diagnoses(contract, findings, translate=translate))


def path_diagnoses(contract: Contract, findings: Iterable[Any], *,
                   translate: Optional[Translate] = None) -> list[Diagnosis]:
    """Each finding path's diagnoses, in the order the paths first appear, not yet merged across
    paths. The findings of one path are judged together, so the diagnoses of several runs whose
    failing paths appear in no other run are the concatenation of each run's (the pytest plugin
    diagnoses each failing item once this way)."""
    fs = _expand(findings)
    if not any(f.status == "fail" for f in fs):
        return []
    fx = _Fixer(contract, translate or translate_ids)
    by_path: dict[str, list[Finding]] = {}
    for f in fs:
        by_path.setdefault(f.path, []).append(f)
    found: list[Diagnosis] = []
    matched = [p for p, pf in by_path.items() if _matches_reference(pf)]
    # every slot judged on any path holds its declared boundary (the cheap all-rows scan judges none)
    judged = [f for f in fs if f.check in ("slot_identity", "verifier_identity") and f.status in ("pass", "fail")]
    intact = bool(judged) and all(f.status == "pass" for f in judged)
    for path, pf in by_path.items():
        if not any(f.status == "fail" for f in pf):
            continue
        view = _PathView(path, pf, tuple(p for p in matched if p != path))
        view.slots_intact = intact
        used: set[str] = set()  # the checks a rule already explained on this path
        for rule in _RULES:
            found += rule(contract, view, fx, used)
    return found


def merge_diagnoses(ds: list[Diagnosis]) -> list[Diagnosis]:
    """One diagnosis per (kind, fault, title, evidence, slots), in order: see :func:`_merge`."""
    return _merge(ds)


def _matches_reference(fs: list[Finding]) -> bool:
    """Most slot-identity judgements on this path pass: the reference is the data's checkpoint."""
    judged = [f for f in fs if f.check == "slot_identity" and f.status in ("pass", "fail")]
    return bool(judged) and sum(f.status == "pass" for f in judged) * 2 > len(judged)


def _merge(ds: list[Diagnosis]) -> list[Diagnosis]:
    """One diagnosis per (kind, fault, title, evidence, slots): paths, checks, support and ids
    united, fix lines united in order (a training path adds its data-generation line)."""
    out: dict[tuple[str, str, str, tuple[str, ...], tuple[str, ...]], Diagnosis] = {}
    for d in ds:
        key = (d.kind, d.fault, d.title, d.evidence, d.slots)
        if key in out:
            o = out[key]
            out[key] = Diagnosis(o.kind, o.fault, o.title, o.evidence, _union_fix(o.fix, d.fix), o.paths + d.paths,
                                 o.slots, tuple(dict.fromkeys(o.checks + d.checks)), {**o.support, **d.support},
                                 {**o.ids, **d.ids})
        else:
            out[key] = d
    return list(out.values())


def _union_fix(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    """``a`` then the lines of ``b`` it lacks, each inserted after the line it follows in ``b``."""
    out = list(a)
    prev: Optional[str] = None
    for line in b:
        if line not in out:
            out.insert(out.index(prev) + 1 if prev is not None and prev in out else len(out), line)
        prev = line
    return tuple(out)


def explained_by(diagnoses: Sequence[Diagnosis], path: str, check: str) -> Optional[int]:
    """1-based number of the first diagnosis that accounts for ``check`` failing on ``path``."""
    for i, d in enumerate(diagnoses, 1):
        if path in d.paths and check in d.checks:
            return i
    return None
