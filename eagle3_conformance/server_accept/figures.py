"""Per-prompt counters -> the run's figures, with percentile-bootstrap intervals over prompts.

Every ratio is pooled over prompts (total numerator / total verify steps, as the server's own
aggregate would be), and its interval resamples prompts (:mod:`eagle3_conformance.acceptance.stats`,
whose ``bootstrap_accept_length`` / ``bootstrap_difference`` take per-prompt ``(numerator, steps)``
pairs: the accept length's ``(committed, steps)``, position ``i``'s ``(c_i, steps)``).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from eagle3_conformance.acceptance.decision import decide_paired
from eagle3_conformance.acceptance.stats import TooFewPrompts, bootstrap_accept_length, merge_histograms
from eagle3_conformance.core.errors import UsageError
from eagle3_conformance.server_accept.result import PromptResult

LEVEL = 0.95
RESAMPLES = 2000


def _pairs(results: Sequence[PromptResult], pos: int = 0) -> list[tuple[int, int]]:
    """``(numerator, steps)`` per prompt: the accept length's (``pos = 0``) or position ``pos``'s."""
    return [(r.committed if pos == 0 else r.accepted_per_pos[pos - 1], r.steps) for r in results]


def _ratio(pairs) -> float:
    steps = sum(s for _, s in pairs)
    return sum(t for t, _ in pairs) / steps if steps else float("nan")


def _interval(pairs) -> list[float]:
    iv = bootstrap_accept_length(pairs, resamples=RESAMPLES, level=LEVEL)
    return [iv.lo, iv.hi]


def figures(results: Sequence[PromptResult], k: int, wall_s: float) -> dict[str, Any]:
    """The run's figures.

    Returns:
        ``{"prompts", "prompts_with_steps", "completion_tokens", "verify_steps", "accept_length": {"value",
        "interval"}, "per_position": [{"position", "value", "interval"}, ...k], "histogram" (summed, or
        None when a source gives none), "wall_s", "tokens_per_s", "level", "resamples"}``.

    Raises:
        UsageError: fewer prompts with a verify step than an interval needs (the message says how many,
            and that ``--prompts`` / ``--max-tokens`` give more).
    """
    try:
        acc = {"value": _ratio(_pairs(results)), "interval": _interval(_pairs(results))}
        per_pos = [{"position": i, "value": _ratio(_pairs(results, i)), "interval": _interval(_pairs(results, i))}
                   for i in range(1, k + 1)]
    except TooFewPrompts as e:
        raise UsageError(f"{e}; run more prompts (--prompts) or longer answers (--max-tokens)") from None
    comp = sum(r.completion_tokens for r in results)
    hists = [r.histogram for r in results if r.steps]
    known = [h for h in hists if h is not None]
    return {"prompts": len(results), "prompts_with_steps": sum(1 for r in results if r.steps),
            "completion_tokens": comp, "verify_steps": sum(r.steps for r in results), "accept_length": acc,
            "per_position": per_pos,
            "histogram": merge_histograms(known) if hists and len(known) == len(hists) else None,
            "wall_s": wall_s, "tokens_per_s": comp / wall_s if wall_s > 0 else None, "level": LEVEL,
            "resamples": RESAMPLES}


def compare(now: Sequence[PromptResult], base: Sequence[PromptResult], k: int, tolerance: float) -> list[dict]:
    """The paired comparison ``now - baseline`` on the same prompts (matched by id, in the baseline's
    order), overall and at each draft position both runs have (``k``: this run's chain length; a
    baseline with another ``k`` is compared on the positions they share).

    Returns:
        one row per figure: ``{"figure": "accept length" | "position i", "baseline", "now", "difference":
        [lo, hi] (paired bootstrap interval), "tolerance" (= tolerance x baseline figure), "decision"
        (:meth:`eagle3_conformance.acceptance.decision.Decision.to_json`: MET / DROPPED / INCONCLUSIVE,
        the smallest detectable drop, the prompts that would decide it), "gated" (True for the accept
        length, whose decision the run waits for; :func:`eagle3_conformance.acceptance.decision.overall`)}``.

    Raises:
        UsageError: the runs do not hold the same prompts, or too few prompts for an interval.
    """
    by_id = {r.id: r for r in now}
    if set(by_id) != {r.id for r in base}:
        raise UsageError(f"the run's prompts {sorted(by_id)} are not the baseline's {sorted(r.id for r in base)}")
    a = [by_id[r.id] for r in base]
    shared = min([k] + [len(r.accepted_per_pos) for r in list(a) + list(base)])
    rows = []
    for pos in range(0, shared + 1):
        pa, pb = _pairs(a, pos), _pairs(base, pos)
        try:
            d = decide_paired(pa, pb, tolerance, resamples=RESAMPLES, level=LEVEL)
        except TooFewPrompts as e:
            raise UsageError(f"{e}; the baseline and this run share too few prompts with verify steps") from None
        b = _ratio(pb)
        rows.append({"figure": "accept length" if pos == 0 else f"position {pos}", "baseline": b, "now": _ratio(pa),
                     "difference": list(d.change), "tolerance": d.tolerance, "decision": d.to_json(),
                     "gated": pos == 0})
    return rows


def detectable_drop(results: Sequence[PromptResult], tolerance: float) -> dict:
    """What a later run compared with this one (as a baseline) could detect: the accept length's
    decision against itself (:func:`eagle3_conformance.acceptance.decision.decide_paired`: a zero change,
    the prompts' own spread), i.e. ``{"tolerance", "detectable_drop"}`` in tokens per verify step.

    Raises:
        UsageError: too few prompts for an interval.
    """
    pairs = _pairs(results)
    try:
        d = decide_paired(pairs, pairs, tolerance, resamples=RESAMPLES, level=LEVEL)
    except TooFewPrompts as e:
        raise UsageError(f"{e}; run more prompts (--prompts) or longer answers (--max-tokens)") from None
    return {"tolerance": d.tolerance, "detectable_drop": d.detectable_drop}


def floor_pairs(results: Sequence[PromptResult]) -> list[tuple[int, int]]:
    """Per prompt with a verify step, the floor's ``(numerator, steps)``: 1 + accepted drafts per verify step
    (:func:`eagle3_conformance.acceptance.decision.floor_from_runs`: no prefill token), the numerator
    ``steps + sum(accepted_per_pos)``; an SGLang answer without a correct-drafts histogram (its per-position
    counts are zeros then) gives ``completion_tokens - 1`` (its accept length less the prefill token)."""
    return [(r.committed - 1 if r.source == "meta_info" and r.histogram is None else r.steps + sum(r.accepted_per_pos),
             r.steps) for r in results if r.steps]


def counters_disagree(results: Sequence[PromptResult], k: int) -> Optional[str]:
    """Why the server's two counts of the same tokens disagree, in words, or None when they agree.

    The accept length (``committed / steps``) and the floor's 1 + accepted drafts per verify step
    (:func:`floor_pairs`) count the same tokens but for the prefill token (SGLang's ``completion_tokens``
    counts it: +1 per request) and an answer cut at ``max_tokens`` or a stop token (the last verify step's
    accepted drafts beyond the cut are not returned: up to ``k`` per request fewer). A difference outside
    that range means the counters contradict each other (a stub or a proxy that rewrites one of them,
    newuser finding 15): the accept length judged and a floor from the drafts cannot both be right."""
    with_steps = [r for r in results if r.steps]
    steps = sum(r.steps for r in with_steps)
    if not steps:
        return None
    committed = sum(r.committed for r in with_steps)
    drafts = sum(n for n, _ in floor_pairs(with_steps))
    prefill = sum(1 for r in with_steps if r.source == "meta_info")
    low, high = prefill - k * len(with_steps), prefill
    if low <= committed - drafts <= high:
        return None
    return (f"the server's counters disagree: its returned tokens give accept length {committed / steps:.3f} per "
            f"verify step, its accepted drafts 1 + {(drafts - steps) / steps:.3f} = {drafts / steps:.3f}; over "
            f"{len(with_steps)} prompts and {steps} verify steps the prefill token and answers cut short explain "
            f"{low} to {high} tokens of difference, not {committed - drafts}. The accept length is what the gate "
            "judged; no floor is taken from counters that contradict it")
