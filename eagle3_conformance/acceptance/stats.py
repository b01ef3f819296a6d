"""Acceptance statistics from accept lengths or from SGLang's correct-drafts histogram: per-position
acceptance, mean accept length, and bootstrap intervals over prompts.

One definition for every source, so the project's CPU loop
(:func:`eagle3_conformance.tools.sglang_cpu.spec_loop.speculative_decode`) and SGLang's real engine
are measured the same way:

* **correct-drafts histogram** ``h``: ``h[j]`` = verify steps in which exactly ``j`` draft tokens
  were accepted (the bonus token excluded), ``j = 0..k``. This is SGLang 0.5.23's
  ``Req.spec_correct_drafts_histogram`` (``srt/managers/schedule_batch.py``,
  ``update_spec_correct_drafts_histogram``; returned per request in ``meta_info`` by
  ``srt/managers/tokenizer_manager.py``), a list grown on demand, so it may be shorter than
  ``k + 1``. The loop's accept length ``a`` (bonus included, SGLang's ``accept_lens``) gives
  ``j = a - 1``.
* **per-position acceptance** ``p_i`` (``i = 1..k``): the share of verify steps in which draft
  position ``i`` was accepted, ``p_i = sum_{j >= i} h[j] / sum(h)`` (a chain: position ``i`` is
  accepted only if ``1..i-1`` were). ``p_1 >= p_2 >= ... >= p_k``. The conditional rate
  ``p_i / p_{i-1}`` says where the chain stops paying.
* **mean accept length** ``1 + sum_j j h[j] / sum(h)`` (SGLang's ``avg_spec_accept_length``),
  **acceptance rate** ``sum_j j h[j] / (k sum(h))`` (accepted / drafted tokens).

Everything here is pure (no torch): lists of ints in, floats out.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Optional, Sequence

MIN_PROMPTS_FOR_INTERVAL = 5
"""Fewer prompts than this give no bootstrap interval (:class:`TooFewPrompts`): with 4 prompts there
are only 35 distinct resamples and the interval's ends are single prompts."""


class TooFewPrompts(ValueError):
    """Too few prompts for a bootstrap interval over prompts (the message says how many)."""


def correct_drafts_histogram(accept_lengths: Sequence[int], k: int) -> list[int]:
    """SGLang-style histogram (``k + 1`` counts) from accept lengths (bonus included, ``1..k+1``).

    Raises:
        ValueError: ``k < 1`` or an accept length outside ``1..k+1``.
    """
    if k < 1:
        raise ValueError(f"k = {k}: a chain drafts at least one token")
    h = [0] * (k + 1)
    for a in accept_lengths:
        if not 1 <= int(a) <= k + 1:
            raise ValueError(f"accept length {a} outside 1..{k + 1} for k = {k}")
        h[int(a) - 1] += 1
    return h


def merge_histograms(hists: Sequence[Sequence[int]]) -> list[int]:
    """Element-wise sum of histograms of possibly different lengths (SGLang's grow on demand)."""
    out: list[int] = []
    for h in hists:
        out.extend([0] * (len(h) - len(out)))
        for j, c in enumerate(h):
            out[j] += int(c)
    return out


def _checked(hist: Sequence[int], k: int) -> list[int]:
    if k < 1:
        raise ValueError(f"k = {k}: a chain drafts at least one token")
    h = [int(c) for c in hist]
    if any(c < 0 for c in h):
        raise ValueError(f"negative count in histogram {h}")
    if any(h[k + 1:]):
        raise ValueError(f"histogram {h} has steps with more than k = {k} correct drafts")
    h = (h + [0] * (k + 1))[: k + 1]
    if not sum(h):
        raise ValueError("empty histogram: no verify step ran")
    return h


def per_position(hist: Sequence[int], k: int) -> list[float]:
    """``[p_1..p_k]``: share of verify steps in which draft position ``i`` was accepted.

    Args:
        hist: correct-drafts histogram (``hist[j]`` steps with ``j`` drafts accepted), any length
            up to ``k + 1`` (SGLang grows it on demand).
        k: draft tokens per verify step (the chain length).

    Raises:
        ValueError: empty histogram, negative counts, or counts beyond ``k`` correct drafts.
    """
    h = _checked(hist, k)
    n = sum(h)
    return [sum(h[i:]) / n for i in range(1, k + 1)]


def conditional_per_position(hist: Sequence[int], k: int) -> list[Optional[float]]:
    """``p_i / p_{i-1}`` (``p_0 = 1``): how often position ``i`` is accepted when it is reached;
    None where position ``i - 1`` was never accepted."""
    p = [1.0] + per_position(hist, k)
    return [None if p[i - 1] == 0 else p[i] / p[i - 1] for i in range(1, k + 1)]


def mean_accept_length(hist: Sequence[int], k: int) -> float:
    """Tokens committed per verify step, bonus included: ``1 + sum(p_i)``."""
    return 1.0 + sum(per_position(hist, k))


def acceptance_rate(hist: Sequence[int], k: int) -> float:
    """Accepted draft tokens / drafted tokens (0..1): ``mean(p_i)``."""
    return sum(per_position(hist, k)) / k


@dataclass(frozen=True)
class Interval:
    """A bootstrap percentile interval: ``lo <= hi``, at ``level`` (e.g. 0.95), from ``resamples``
    resamples of ``prompts`` prompts."""

    lo: float
    hi: float
    level: float
    prompts: int
    resamples: int


def _ratio(pairs) -> float:
    steps = sum(s for _, s in pairs)
    return sum(t for t, _ in pairs) / steps if steps else float("nan")


def bootstrap_accept_length(per_prompt: Sequence[tuple[int, int]], *, resamples: int = 2000, level: float = 0.95,
                            seed: int = 0) -> Interval:
    """Percentile bootstrap over prompts of the mean accept length (total committed tokens / total
    verify steps, as the engine reports it).

    Args:
        per_prompt: per prompt ``(sum of accept lengths, verify steps)``.
        resamples, level, seed: the bootstrap (``random.Random(seed)``: a fixed algorithm).

    Raises:
        TooFewPrompts: fewer than :data:`MIN_PROMPTS_FOR_INTERVAL` prompts with a verify step.
    """
    pairs = [(int(t), int(s)) for t, s in per_prompt if s]
    _enough(len(pairs))
    rng = random.Random(seed)
    stats = sorted(_ratio([rng.choice(pairs) for _ in pairs]) for _ in range(resamples))
    return Interval(*_ends(stats, level), level=level, prompts=len(pairs), resamples=resamples)


def bootstrap_difference(a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]], *, resamples: int = 2000,
                         level: float = 0.95, seed: int = 0) -> Interval:
    """Paired percentile bootstrap over prompts of ``accept_length(a) - accept_length(b)``; ``a`` and
    ``b`` are per-prompt ``(sum, steps)`` on the same prompts in the same order (a prompt is
    resampled in both). ``lo > 0``: ``a`` accepts more than ``b`` beyond the prompts' noise.

    Raises:
        TooFewPrompts: fewer than :data:`MIN_PROMPTS_FOR_INTERVAL` prompts.
        ValueError: the two lists have different lengths.
    """
    if len(a) != len(b):
        raise ValueError(f"paired bootstrap over {len(a)} and {len(b)} prompts")
    idx = [i for i in range(len(a)) if a[i][1] and b[i][1]]
    _enough(len(idx))
    rng = random.Random(seed)
    stats = []
    for _ in range(resamples):
        pick = [rng.choice(idx) for _ in idx]
        stats.append(_ratio([a[i] for i in pick]) - _ratio([b[i] for i in pick]))
    stats.sort()
    return Interval(*_ends(stats, level), level=level, prompts=len(idx), resamples=resamples)


def _enough(n: int) -> None:
    if n < MIN_PROMPTS_FOR_INTERVAL:
        raise TooFewPrompts(f"{n} prompt(s) with a verify step: a bootstrap interval over prompts needs at least "
                            f"{MIN_PROMPTS_FOR_INTERVAL}")


def _ends(stats: list[float], level: float) -> tuple[float, float]:
    tail = (1.0 - level) / 2
    n = len(stats)
    return stats[int(tail * (n - 1))], stats[int(round((1 - tail) * (n - 1)))]


def drafts_per_step_interval(hist: Sequence[int], level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, lo, hi)``: accepted draft tokens per verify step (``sum_j j h[j] / sum(h)``, accept length
    minus the bonus token) with a normal-approximation interval over verify steps (each step's count is
    one value in ``0..k``), and, where no step accepted a draft, the upper end ``3 / steps`` (the rule of
    three: the 95% bound of a rate with no event). Steps of one request are not independent, so the
    interval is narrower than one over requests; a threshold judged with it keeps a margin on both sides
    (docs/accept.md, "A draft that accepts nothing").

    Raises:
        ValueError: an empty histogram or a negative count; ``level`` other than 0.95 / 0.99.
    """
    z = {0.95: 1.959964, 0.99: 2.575829}.get(level)
    if z is None:
        raise ValueError(f"level {level}: 0.95 or 0.99")
    h = [int(c) for c in hist]
    if any(c < 0 for c in h) or not sum(h):
        raise ValueError(f"histogram {h}: no verify step, or a negative count")
    n = sum(h)
    mean = sum(j * c for j, c in enumerate(h)) / n
    var = sum(c * (j - mean) ** 2 for j, c in enumerate(h)) / max(n - 1, 1)
    half = z * (var / n) ** 0.5
    hi = mean + half if mean > 0 else 3.0 / n
    return mean, max(0.0, mean - half), hi


def histogram_from_per_pos(steps: int, accepted_per_pos: Sequence[int]) -> list[int]:
    """The correct-drafts histogram from per-position counts (``c_i``: steps whose position ``i`` was
    accepted; vLLM's ``spec_decode_num_accepted_tokens_per_pos``): ``h[0] = steps - c_1``,
    ``h[j] = c_j - c_{j+1}``, ``h[k] = c_k`` (the chain rule, inverted).

    Raises:
        ValueError: counts that are not a chain (``c_i`` increasing, or above ``steps``).
    """
    c = [int(steps)] + [int(x) for x in accepted_per_pos] + [0]
    h = [c[j] - c[j + 1] for j in range(len(c) - 1)]
    if any(x < 0 for x in h):
        raise ValueError(f"per-position counts {list(accepted_per_pos)} over {steps} steps are not a chain")
    return h


def draft_acceptance_fact(acceptance: Optional[dict], source: str) -> dict:
    """The ``draft_acceptance`` fact (:func:`eagle3_conformance.checks.acceptance.check_draft_acceptance`) from
    an engine's acceptance figures (``sglang-engine``'s and ``vllm-engine``'s ``avg_accept_length`` fact):
    its ``spec_correct_drafts_histogram``, or vLLM's ``num_drafts`` and ``accepted_per_pos`` counters when no
    request carried a histogram; ``{"skip": why}`` when there is neither."""
    a = acceptance if isinstance(acceptance, dict) else {}
    hist = [int(x) for x in a.get("spec_correct_drafts_histogram") or []]
    if not sum(hist) and a.get("num_drafts"):
        try:
            hist = histogram_from_per_pos(int(a["num_drafts"]), a.get("accepted_per_pos") or [])
        except ValueError as e:
            return {"skip": str(e), "source": source}
    if not sum(hist):
        return {"skip": "the engine reported no verify step", "source": source}
    per_req = a.get("per_request") or []
    return {"histogram": hist, "source": source, "requests": len(per_req) or None}
