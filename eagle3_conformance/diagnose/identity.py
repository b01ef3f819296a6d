"""Diagnoses of the slot-identity checks (checks/identity.py): which boundary each slot holds
instead of the declared one (the embedding for B_L, engine defaults, a convention shift, a
permutation, one slot off, another checkpoint, no boundary at all, an MTP head's input side)."""

from __future__ import annotations

from typing import Optional

from eagle3_conformance.contract import Contract
from eagle3_conformance.core.findings import stored_path
from eagle3_conformance.core.notation import Boundary
from eagle3_conformance.diagnose.base import (
    _IDENTITY_CHECKS,
    _VERIFIER_CHECKS,
    Diagnosis,
    _defaults,
    _explained,
    _idx,
    _Judged,
    _PathView,
)
from eagle3_conformance.diagnose.fixes import _Fixer, _fmt_b


def _mtp_input_side(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """R49 (fault-kinds.md field reports): an MTP head handed the other side of the final norm than the
    contract states (B_L where F is declared, or the reverse)."""
    if c.method != "mtp" or "slot_identity" in used:
        return []
    j = v.judged("slot_identity").get("slot 0")
    L = c.L
    if j is None or not j.wrong or {j.declared, j.observed} != {f"B_{L}", "F"}:
        return []
    used.update(_IDENTITY_CHECKS + _VERIFIER_CHECKS)
    got, want = j.observed, j.declared
    served = {"F": "F, the final norm's output (SGLang 0.5.23 hands an MTP head the LM head's input, "
                   "logits_processor.py:853-872)",
              f"B_{L}": f"B_{L}, the last layer's output before the final norm"}
    fix = (f"serve the head with {want}, the tensor it was trained on (speculators 0.9.0 trains MTP on B_{L}, "
           "models/mtp/data.py; SGLang 0.5.23 feeds F): an engine that feeds the other side needs the head "
           "retrained, or the norm applied / removed before the head",
           f"or, if the head was trained on {got}, state it: capture.boundaries: [{got}] and verifier_last: "
           f"{{tensor: {got}, norm: {'post' if got == 'F' else 'pre'}}} (never defaulted: both sides are in use)")
    return [Diagnosis("mtp-input-side", "K4", f"the MTP head is fed {got} where the contract states {want} (R49)",
                      (f"slot 0 is {served[got]}, on {j.fails} of {j.judged} {v.unit}; contract says {want}",),
                      fix, (v.path,), ("slot 0",), _explained(v, _IDENTITY_CHECKS + _VERIFIER_CHECKS),
                      {v.path: f"{j.fails}/{j.judged} {v.unit}"})]


def _embedding_for_last(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    aux = v.aux()
    if not aux or "slot_identity" in used:
        return []
    if aux[0].observed != "B_0" or aux[0].declared == "B_0":
        return []
    if any(aux[i].observed != aux[i - 1].declared for i in range(1, len(aux))):
        return []
    ver = v.verifier()
    if ver is not None and ver.observed != aux[-1].declared:
        return []
    declared = [j.declared for j in aux]
    stored = ["B_0"] + declared[:-1]
    ev = [f"slot 0 is B_0 (embedding output); contract says {declared[0]}"]
    if len(aux) > 1:
        ev.append(f"slots 1..{len(aux) - 1} hold {', '.join(declared[:-1])}: each the boundary declared one slot "
                  "earlier")
    ids: dict = {}
    if ver is not None:
        ev.append(f"the verifier slot holds {declared[-1]}, the last aux boundary; contract says {ver.declared}")
        ev.append(f"stored slots: {_fmt_b(stored + [declared[-1]])}; contract: {_fmt_b(declared + [ver.declared])}")
        title = "the embedding B_0 was captured in place of B_L: every slot holds the boundary declared one slot earlier"
        fix = [f"regenerate the data without the embedding and with B_{c.L} last: the generator's list must be "
               f"the aux ids then L, never 0 or -1"] + fx.data_generation(declared, ids)
    else:
        title = "slot 0 is the embedding B_0: an id reaches the embedding and pushes every boundary one slot later"
        fix = ["an id in the draft config reaches B_0 (-1 under SGLang's +1 rule, 0 as a boundary id); write:"] + \
            fx.draft_config(declared, ids)
    used.update(_IDENTITY_CHECKS + _VERIFIER_CHECKS)
    slots = tuple(j.label for j in aux) + (("verifier",) if ver is not None else ())
    return [Diagnosis("embedding-for-last", "K2", title, tuple(ev), tuple(fix), (v.path,), slots,
                      _explained(v, _IDENTITY_CHECKS + _VERIFIER_CHECKS), {v.path: v.support(aux)}, ids)]


def _wrong_aux(v: _PathView) -> Optional[list[_Judged]]:
    aux = v.aux()
    if not aux or not all(j.wrong for j in aux):
        return None
    return aux


def _engine_default(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    if "slot_identity" in used:
        return []
    aux = _wrong_aux(v)
    dflt = _defaults(c.L)
    if aux is None or [j.observed for j in aux] != dflt or dflt == [str(b) for b in c.aux]:
        return []
    declared = [j.declared for j in aux]
    ids: dict = {}
    ev = [f"slots hold {_fmt_b(dflt)}: the default layers (2, L//2, L-3) for L = {c.L}; contract says "
          f"{_fmt_b(declared)}"]
    shift = {(_idx(j.observed) or 0) - (_idx(j.declared) or 0) for j in aux}
    if len(shift) == 1:
        ev.append("these are also every declared boundary shifted by one: check the id convention too")
    if stored_path(v.path):
        title = "the data generator captured its default layers, not the declared ones"
        fix = ["pass the ids to the generator explicitly:"] + fx.data_generation(declared, ids)
    else:
        title = "the engine never saw the draft's ids and captured its default layers"
        fix = ["SGLang reads only the nested key; a top-level or misspelled key falls back to the defaults "
               "silently (fault-kinds.md K1):"] + fx.draft_config(declared, ids, tool="sglang")
    used.update(_IDENTITY_CHECKS)
    return [Diagnosis("engine-default", "K1", title, tuple(ev), tuple(fix), (v.path,), tuple(j.label for j in aux),
                      _explained(v, _IDENTITY_CHECKS), {v.path: v.support(aux)}, ids)]


def _convention_shift(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    if "slot_identity" in used:
        return []
    aux = _wrong_aux(v)
    if aux is None:
        return []
    shifts = set()
    for j in aux:
        a, b = _idx(j.declared), _idx(j.observed)
        if a is None or b is None:
            return []
        shifts.add(b - a)
    if len(shifts) != 1 or shifts & {1, -1} != shifts:
        return []
    s = shifts.pop()
    declared = [j.declared for j in aux]
    observed = [j.observed for j in aux]
    word = "deeper" if s > 0 else "shallower"
    title = (f"every aux slot is one boundary {word} than declared (B_{{k{s:+d}}} for B_k): the ids were read "
             "under the other convention")
    ev = [", ".join(f"{j.label} is {j.observed}" for j in aux) + f"; contract says {', '.join(declared)}",
          "output-of id i captures B_{i+1}; entering (boundary) id i captures B_i: one list read both ways is "
          "one boundary off"]
    ids: dict = {}
    fix = ["write the ids for the tool that reads them:"] + fx.for_path(v.path, declared, ids)
    fix += fx.contract_change(observed, ids, "this data" if stored_path(v.path) else "this capture")
    used.update(_IDENTITY_CHECKS)
    return [Diagnosis("convention-shift", "K2", title, tuple(ev), tuple(fix), (v.path,), tuple(j.label for j in aux),
                      _explained(v, _IDENTITY_CHECKS), {v.path: v.support(aux)}, ids)]


def _permuted(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    if "slot_identity" in used:
        return []
    aux = v.aux()
    if not aux or not any(j.wrong for j in aux):
        return []
    declared = [j.declared for j in aux]
    observed = [j.observed for j in aux]
    if sorted(declared) != sorted(observed) or declared == observed:
        return []
    ids: dict = {}
    ev = [f"the slots hold {_fmt_b(observed)}: the declared {_fmt_b(declared)} in another order"]
    fix = ["store the aux slots in ascending layer order, as declared; the concat follows list order in the data "
           "generator and the HF backend (SGLang always concatenates ascending): sort the ids"] + \
        fx.for_path(v.path, declared, ids)
    used.update(_IDENTITY_CHECKS)
    wrong = tuple(j.label for j in aux if j.wrong)
    return [Diagnosis("slots-permuted", "K2", "the aux slots hold the declared boundaries in another order",
                      tuple(ev), tuple(fix), (v.path,), wrong, _explained(v, _IDENTITY_CHECKS),
                      {v.path: v.support([j for j in aux if j.wrong])}, ids)]


def _no_boundary(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    if "slot_identity" in used:
        return []
    aux = v.aux()
    ver = v.verifier()
    none = [j for j in aux if j.wrong and j.observed == "none"]
    if not none:
        return []
    if len(none) == len(aux) and (ver is None or ver.fails * 2 > ver.judged) and not v.others_matched:
        used.update(_IDENTITY_CHECKS + _VERIFIER_CHECKS)
        ev = [f"{', '.join(j.label for j in none)}: the best cosine to any boundary B_0..B_{c.L}, F of the "
              "reference is below 0.5, on most samples"]
        if ver is not None:
            ev.append(f"the verifier slot is not {ver.declared} either (slot identity fails on {ver.fails} of "
                      f"{ver.judged} {v.unit})")
        return [Diagnosis(
            "reference-mismatch", "", "no slot matches its boundary in the reference: the reference is another "
            "checkpoint than the one the data was captured from", tuple(ev),
            ("pass --reference the exact target checkpoint the data was generated with (same weights, not only "
             "the same config)", "if it is that checkpoint, the hidden states come from another model"),
            (v.path,), tuple(j.label for j in none) + (("verifier",) if ver is not None else ()),
            _explained(v, _IDENTITY_CHECKS + _VERIFIER_CHECKS), {v.path: v.support(none)})]
    used.update({"slot_identity", "row_fingerprint", "feature_alignment", "magnitude", "norm_band", "no_embedding"})
    good = [j.label for j in aux + ([ver] if ver is not None else []) if not j.fails * 2 > j.judged]
    ev = [f"{j.label} (declared {j.declared}) matches no boundary of the reference (best cosine below 0.5)"
          for j in none]
    if good:
        ev.append(f"{', '.join(good)} match{'es' if len(good) == 1 else ''} the declared boundar"
                  f"{'y' if len(good) == 1 else 'ies'}: the reference is the right model")
    if v.others_matched:
        ev.append(f"on {', '.join(v.others_matched)} the same reference matches the declared boundaries: the "
                  "reference is the right checkpoint")
    labels = ", ".join(j.label for j in none)
    return [Diagnosis(
        "not-a-boundary", "K4", f"{labels} hold{'s' if len(none) == 1 else ''} a tensor that is no residual-stream "
        "boundary", tuple(ev),
        ("capture the residual stream entering the layer (hidden + residual after the fused add), not a layer's "
         "update without its residual (vllm-project/vllm#14464); rows of zeros are padding of rows never stored "
         "(token-sharded rows without the gather, K8)",),
        (v.path,), tuple(j.label for j in none), _explained(v, ("slot_identity", "row_fingerprint",
                                                                "feature_alignment", "no_embedding", "norm_band"),
                                                            [j.label for j in none]),
        {v.path: v.support(none)})]


def _loose_match(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """Slots whose best match IS the declared boundary but below the gate (cosine or margin): a
    transformed copy of it (post-norm with its weights, the update without the residual)."""
    if "slot_identity" in used:
        return []
    aux = v.aux()
    loose = [j for j in aux if j.observed == j.declared and j.fails * 2 > j.judged]
    ver = v.verifier()
    if not loose or (len(loose) == len(aux) > 1 and (ver is None or ver.fails * 2 > ver.judged)
                     and v.failing("row_fingerprint")):
        return []  # every slot at once, rows failing: rows of other tokens (rows-misassigned), not a transform
    used.update({"slot_identity", "row_fingerprint", "feature_alignment", "magnitude", "norm_band"})
    labels = ", ".join(j.label for j in loose)
    ev = [f"{j.label} resembles {j.declared} more than any other boundary, but not closely enough to be it "
          f"(slot_identity fails on {j.fails} of {j.judged} {v.unit})" for j in loose]
    return [Diagnosis(
        "not-a-boundary", "K4", f"{labels} hold{'s' if len(loose) == 1 else ''} a transformed copy of the declared "
        "boundary, not the boundary itself", tuple(ev),
        ("capture the residual stream entering the layer as declared: not after the layer's input RMSNorm (its "
         "weights change the direction), not the layer's update without its residual (vllm-project/vllm#14464)",),
        (v.path,), tuple(j.label for j in loose),
        _explained(v, ("slot_identity", "row_fingerprint", "feature_alignment", "norm_band")),
        {v.path: v.support(loose)})]


def _slot_off(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    if "slot_identity" in used:
        return []
    aux = v.aux()
    wrong = [j for j in aux if j.wrong and _idx(j.observed) is not None and _idx(j.declared) is not None]
    if not wrong:
        return []
    declared = [j.declared for j in aux]
    one = all(abs(_idx(j.observed) - _idx(j.declared)) == 1 for j in wrong)  # type: ignore[operator]
    ids: dict = {}
    ev = [f"{j.label} is {Boundary.parse(j.observed).describe(c.L)}; contract says {j.declared}" for j in wrong]
    ok = [j.label for j in aux if not j.wrong]
    if ok:
        ev.append(f"{', '.join(ok)} hold{'s' if len(ok) == 1 else ''} the declared boundar{'y' if len(ok) == 1 else 'ies'}")
    what = "one boundary off" if one else "another boundary"
    title = f"{', '.join(j.label for j in wrong)} hold{'s' if len(wrong) == 1 else ''} {what}"
    fix = [f"the id{'s' if len(wrong) > 1 else ''} of {', '.join(j.label for j in wrong)} "
           f"{'were' if len(wrong) > 1 else 'was'} written wrong; the whole list reads:"] + \
        fx.for_path(v.path, declared, ids)
    observed = [j.observed for j in aux]
    if len(set(observed)) == len(observed) and observed == sorted(observed, key=lambda b: _idx(b) or 0):
        fix += fx.contract_change(observed, ids)
    used.update(_IDENTITY_CHECKS)
    return [Diagnosis("slot-off", "K2" if one else "K1", title, tuple(ev), tuple(fix), (v.path,),
                      tuple(j.label for j in wrong), _explained(v, _IDENTITY_CHECKS), {v.path: v.support(wrong)}, ids)]


# --- issue 37 item 6: F in an aux slot -----------------------------------------------------------------


def _final_norm_in_aux(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """An aux slot holds F (the final norm's output) where the contract declares a boundary B_k: named
    by ``slot_identity`` (observed ``F``) but matched by no boundary pattern (F has no index). The usual
    cause: a generator that stores ``output_hidden_states[L]``, which transformers overwrites with
    ``last_hidden_state`` = F (transformers 5.19.0 utils/output_capturing.py:242-246, 296-297
    ``tie_last_hidden_states``), or an engine capturing after its final norm."""
    if "slot_identity" in used:
        return []
    aux = v.aux()
    fs = [j for j in aux if j.wrong and j.observed == "F" and j.declared != "F"]
    if not fs:
        return []
    others = [j for j in aux if j.wrong and j not in fs]
    labels = tuple(j.label for j in fs)
    declared = [j.declared for j in aux]
    ev = [f"{j.label} is F, the final norm's output (post-norm), on {j.fails} of {j.judged} {v.unit}; contract says "
          f"{j.declared} (pre-norm residual stream)" for j in fs]
    ok = [j.label for j in aux if not j.wrong]
    if ok:
        ev.append(f"{', '.join(ok)} hold{'s' if len(ok) == 1 else ''} the declared boundar"
                  f"{'y' if len(ok) == 1 else 'ies'}")
    deep = [j for j in fs if _idx(j.declared) == c.L]
    ids: dict = {}
    fix = [f"store {', '.join(j.declared for j in fs)} before the final norm: transformers' output_hidden_states[{c.L}] "
           "is F, not B_L (it overwrites the last entry with last_hidden_state: utils/output_capturing.py "
           "tie_last_hidden_states); take B_k from a hook on layer k's input (B_L: the final norm's input) or use the "
           "engine's own aux capture"] + fx.for_path(v.path, declared, ids)
    if deep:
        fix.append(f"or, if the draft was trained on F there, state it: capture.boundaries with F in place of B_{c.L}")
    if not others:
        used.update(_IDENTITY_CHECKS)
    return [Diagnosis(
        "final-norm-in-aux", "K4", f"{', '.join(labels)} hold{'s' if len(fs) == 1 else ''} F (the final norm's output) "
        f"where the contract declares {', '.join(j.declared for j in fs)}", tuple(ev), tuple(fix), (v.path,), labels,
        _explained(v, _IDENTITY_CHECKS, labels), {v.path: v.support(fs)}, ids)]
