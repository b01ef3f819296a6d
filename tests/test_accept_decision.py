"""The acceptance decision core (:mod:`eagle3_conformance.acceptance.decision`): MET / DROPPED /
INCONCLUSIVE from a paired interval and the tolerance, the smallest detectable drop, the units that
would decide an inconclusive run. The issue-41 case is the measured one: the 8-prompt x 32-token set
against a draft whose config ids were all one too high, paired change [-0.092, +0.054], tolerance 0.076."""

from __future__ import annotations

import math

import pytest

from eagle3_conformance.acceptance.decision import (
    DROPPED,
    INCONCLUSIVE,
    MET,
    decide,
    decide_paired,
    overall,
)
from eagle3_conformance.acceptance.stats import TooFewPrompts


def test_the_issue_case_is_inconclusive_not_met():
    d = decide((-0.092, 0.054), -0.019, 0.0766, 8)
    assert d.verdict == INCONCLUSIVE
    # the estimate lies above -tolerance: it needs the lower half-width (0.073) to shrink under the
    # margin (0.0576): 8 x (0.073 / 0.0576)^2 = 12.85 -> 13 prompts
    assert d.units_needed == math.ceil(8 * (0.073 / (0.0766 - 0.019)) ** 2) == 13
    assert d.detectable_drop == pytest.approx(0.0766 + 0.073)


def test_met_needs_the_whole_interval_above_minus_tolerance():
    assert decide((-0.05, 0.03), -0.01, 0.076, 8).verdict == MET
    assert decide((-0.0761, 0.0), -0.03, 0.076, 8).verdict == INCONCLUSIVE
    assert decide((-0.076, 0.0), -0.03, 0.076, 8).verdict == MET  # on the line: within the tolerance


def test_dropped_needs_the_whole_interval_below_minus_tolerance():
    d = decide((-0.59, -0.38), -0.48, 0.077, 8)
    assert d.verdict == DROPPED and d.units_needed is None
    assert decide((-0.59, -0.077), -0.3, 0.077, 8).verdict == INCONCLUSIVE


def test_an_estimate_below_the_line_asks_for_the_upper_half_width_to_shrink():
    d = decide((-0.20, -0.05), -0.12, 0.076, 8)
    assert d.verdict == INCONCLUSIVE
    assert d.units_needed == math.ceil(8 * (0.07 / 0.044) ** 2)


def test_an_estimate_on_the_tolerance_has_no_number_of_units():
    assert decide((-0.1, -0.05), -0.076, 0.076, 8).units_needed is None


def test_a_zero_width_run_takes_the_baselines_spread_for_the_detectable_drop():
    d = decide((0.0, 0.0), 0.0, 0.077, 8, spread=0.098)
    assert d.verdict == MET and d.detectable_drop == pytest.approx(0.175)
    assert decide((0.0, 0.0), 0.0, 0.077, 8).detectable_drop == pytest.approx(0.077)


@pytest.mark.parametrize("bad", [dict(change=(0.1, -0.1)), dict(tolerance=-0.01), dict(units=0),
                                 dict(change=(float("nan"), 0.0)), dict(spread=-1.0)])
def test_bad_input_is_refused(bad):
    kw = dict(change=(-0.1, 0.1), estimate=0.0, tolerance=0.05, units=8, spread=0.0) | bad
    with pytest.raises(ValueError):
        decide(**kw)


def _per_prompt(hist_per_prompt):
    """(committed, steps) per prompt from per-prompt correct-drafts histograms (SGLang's definition
    without the prefill token: committed = steps + accepted drafts)."""
    return [(sum(h) + sum(j * c for j, c in enumerate(h)), sum(h)) for h in hist_per_prompt]


# the correct pair's 8 x 32 per-prompt histograms as the real server reported them (docs/accept.md)
CORRECT = [[14, 4, 3], [11, 2, 3, 2], [14, 5, 1, 1], [16, 6, 0, 1], [12, 6, 1, 1], [10, 7, 1, 1], [15, 3, 1, 2],
           [17, 6, 1]]


def test_decide_paired_on_identical_runs_is_met_with_the_baselines_spread():
    base = _per_prompt(CORRECT)
    d = decide_paired(base, base, 0.05)
    assert d.verdict == MET and d.change == (0.0, 0.0)
    assert d.detectable_drop > d.tolerance  # the baseline's spread, never "any drop over 5%"


def test_decide_paired_on_a_draft_that_accepts_nothing_is_dropped():
    base = _per_prompt(CORRECT)
    now = [(s, s) for _, s in base]
    d = decide_paired(now, base, 0.05)
    assert d.verdict == DROPPED and d.change[1] < -d.tolerance


def test_decide_paired_needs_five_units():
    with pytest.raises(TooFewPrompts):
        decide_paired([(3, 2)] * 4, [(3, 2)] * 4, 0.05)
    with pytest.raises(ValueError):
        decide_paired([(3, 2)] * 8, [(3, 2)] * 8, 1.0)


def test_overall_waits_only_for_gated_figures():
    met = decide((0.0, 0.0), 0.0, 0.07, 8)
    inc = decide((-0.1, 0.05), -0.02, 0.07, 8)
    drop = decide((-0.5, -0.3), -0.4, 0.07, 8)
    assert overall([met, inc], [True, False]) == MET
    assert overall([inc, met], [True, False]) == INCONCLUSIVE
    assert overall([met, drop], [True, False]) == DROPPED
    with pytest.raises(ValueError):
        overall([], [])
