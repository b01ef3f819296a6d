"""Diagnoses of the draft's own acceptance (checks/acceptance.py) and its static vocabulary
(checks/vocab.py ``draft_vocab``): a draft whose boundary conforms but which accepts almost nothing
(``draft-accepts-nothing``: the causes after the boundary, and what to look at), and a draft checkpoint
whose d2t/t2d or lm_head contradict the target or the contract (``draft-vocab-mapping``)."""

from __future__ import annotations

from eagle3_conformance.checks.registry import CAPTURE, PAIR, REFERENCE, emitting
from eagle3_conformance.contract import Contract
from eagle3_conformance.diagnose.base import Diagnosis, _PathView
from eagle3_conformance.diagnose.fixes import _Fixer
from eagle3_conformance.diagnose.precision import used_precision

_NOT_BOUNDARY = ("sample_available", "dtype", "id_dtype", "production_precision")
"""Capture checks whose failure says nothing about which tensor reached the draft (an unreadable record,
the served dtype: their own diagnoses)."""


def _boundary_failures(v: _PathView, used: set) -> list[str]:
    """The failing checks of this path that judge what reached the draft (capture, reference and pair
    checks), but for failures a precision rule showed to be a lower precision's noise
    (:func:`eagle3_conformance.diagnose.precision.used_precision`)."""
    noise = used_precision(used)
    out = []
    for name, fs in v.by_check.items():
        spec = emitting(name)
        if spec is None or spec.judges not in (CAPTURE, REFERENCE, PAIR) or name in _NOT_BOUNDARY:
            continue
        if any(f.status == "fail" and f not in noise for f in fs):
            out.append(name)
    return out


def _judged_boundary(v: _PathView) -> str:
    ids = [f for f in v.by_check.get("slot_identity", []) if f.status in ("pass", "fail")]
    if not ids:
        return ("the boundary was not judged on this path (acceptance only: check-captures or the sglang-engine "
                "path judge what reaches the draft)")
    return (f"no check of what reaches the draft failed: slot_identity passed {len(ids)} of {len(ids)} "
            "judgements, so the draft received what the contract declares")


def _vocab_line(v: _PathView) -> tuple[str, str]:
    """(evidence, fix) on the draft's vocabulary from the static ``draft_vocab`` finding."""
    fs = v.by_check.get("draft_vocab", [])
    bad = [f for f in fs if f.status == "fail"]
    if bad:
        return (f"the served draft checkpoint's vocabulary mapping is wrong: {bad[0].observed} ({bad[0].where})",
                "fix the draft's vocabulary mapping first: re-export d2t (offsets: target id = i + d2t[i], "
                "SGLang's hot_token_id) and t2d from the training run's vocabulary (speculators "
                "build_vocab_mappings_from_distribution), with lm_head rows in draft-id order")
    ok = [f for f in fs if f.status == "pass"]
    if ok:
        return ("the draft checkpoint's d2t/t2d and lm_head are well-formed against the target's vocabulary "
                f"({ok[0].where}); a mapping from another training run is well-formed too (a contract "
                "vocab.mapping_sha256 pins the right one)",
                "d2t/t2d: compare them with the ones the draft was trained with (vocab.mapping_sha256 in the "
                "contract checks it on every path)")
    why = next((f.message for f in fs if f.status == "skip"), "no draft checkpoint was read on this path")
    return (f"the draft's vocabulary mapping was not read: {why}",
            "d2t/t2d: a reduced-vocabulary draft needs d2t (without it SGLang takes draft id i for target id i); "
            "check its length, that i + d2t[i] increases inside the target's vocabulary, and that it is the "
            "training run's")


def _accepts_nothing(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """``draft_acceptance`` failed and nothing that judges the boundary failed: the draft receives the
    declared tensors and still accepts almost nothing, so the cause lies after the boundary."""
    bad = v.failing("draft_acceptance")
    if not bad or _boundary_failures(v, used):
        return []
    ob = bad[0].observed if isinstance(bad[0].observed, dict) else {}
    vocab_ev, vocab_fix = _vocab_line(v)
    claimed = ("draft_acceptance",) + (("draft_vocab",) if v.failing("draft_vocab") else ()) + \
        (("accept_length",) if v.failing("accept_length") else ())
    used.update(claimed)
    return [Diagnosis(
        "draft-accepts-nothing", "", "the draft receives what the contract declares but accepts almost nothing: the "
        "cause lies after the boundary",
        (f"{ob.get('drafts_per_step', '?')} accepted drafts per verify step {ob.get('interval', '')} over "
         f"{ob.get('steps', '?')} verify steps (accept length {ob.get('accept_length', '?')}), by the engine's own "
         "counters", _judged_boundary(v), vocab_ev),
        (vocab_fix,
         "the draft's weights: serve the checkpoint the training run exported (its digest), and read the server's log "
         "for parameters the loader did not find (SGLang keeps an absent parameter at its initial values); an "
         "untrained or re-initialised draft accepts nothing",
         "the shared embedding / lm_head: SGLang's EAGLE-3 draft always reads the target's embedding "
         "(eagle_worker_v2.py init_lm_head -> set_embed), and its own lm_head over draft_vocab_size ids (the "
         "target's when the config has no draft_vocab_size): a draft trained against another target's embedding "
         "or tokenizer, or with its head tied to another vocabulary, accepts nothing",
         "then compare the served acceptance with the training run's own validation acceptance"),
        (v.path,), (), claimed, {v.path: f"{ob.get('steps', '?')} verify steps"})]


def _draft_vocab(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """``draft_vocab`` failed (and ``draft-accepts-nothing`` did not already name it): the served draft's
    checkpoint contradicts the target's vocabulary or the contract."""
    bad = v.failing("draft_vocab")
    if not bad or "draft_vocab" in used:
        return []
    used.add("draft_vocab")
    ev, fix = _vocab_line(v)
    measured = [f for f in v.by_check.get("draft_acceptance", []) if f.status in ("pass", "fail")]
    return [Diagnosis(
        "draft-vocab-mapping", "K10", "the draft checkpoint's vocabulary mapping contradicts the target or the contract",
        (ev, "the draft's acceptance was " + ("measured and is above almost nothing: the mapping may still cost "
                                              "acceptance" if measured else "not measured here")),
        (fix,), (v.path,), ("vocab",), ("draft_vocab",), {v.path: bad[0].where})]
