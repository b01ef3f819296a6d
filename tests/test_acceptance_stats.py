"""Per-position acceptance and bootstrap intervals (eagle3_conformance.acceptance.stats): values
worked out by hand, SGLang's histogram convention, and the refusals."""

import pytest

from eagle3_conformance.acceptance import stats as A


def test_histogram_from_accept_lengths_counts_correct_drafts_without_the_bonus():
    # accept lengths 1..4 for k = 3: 0..3 drafts accepted
    assert A.correct_drafts_histogram([1, 1, 2, 4, 3, 4], 3) == [2, 1, 1, 2]
    with pytest.raises(ValueError, match="outside 1..4"):
        A.correct_drafts_histogram([5], 3)
    with pytest.raises(ValueError, match="k = 0"):
        A.correct_drafts_histogram([1], 0)


def test_per_position_by_hand():
    # 10 steps: 4 with 0 drafts accepted, 3 with 1, 2 with 2, 1 with 3
    h = [4, 3, 2, 1]
    assert A.per_position(h, 3) == pytest.approx([0.6, 0.3, 0.1])
    assert A.conditional_per_position(h, 3) == pytest.approx([0.6, 0.5, 1 / 3])
    assert A.mean_accept_length(h, 3) == pytest.approx(1 + (3 * 1 + 2 * 2 + 1 * 3) / 10)
    assert A.acceptance_rate(h, 3) == pytest.approx(10 / 30)


def test_sglang_histograms_grow_on_demand_and_merge():
    # SGLang extends the list only as far as the largest count seen
    assert A.per_position([5, 5], 3) == pytest.approx([0.5, 0.0, 0.0])
    assert A.merge_histograms([[1, 2], [0, 0, 0, 3]]) == [1, 2, 0, 3]
    assert A.conditional_per_position([5], 2) == [0.0, None]


def test_per_position_refuses_bad_histograms():
    with pytest.raises(ValueError, match="more than k = 2"):
        A.per_position([1, 1, 1, 1], 2)
    with pytest.raises(ValueError, match="empty"):
        A.per_position([0, 0], 1)
    with pytest.raises(ValueError, match="negative"):
        A.per_position([1, -1], 1)


def test_bootstrap_interval_brackets_the_mean_and_is_deterministic():
    per = [(20, 10), (30, 10), (25, 10), (15, 10), (35, 10), (22, 10)]
    i = A.bootstrap_accept_length(per, seed=3)
    mean = sum(t for t, _ in per) / sum(s for _, s in per)
    assert i.lo < mean < i.hi
    assert i == A.bootstrap_accept_length(per, seed=3)
    assert i.prompts == 6 and i.level == 0.95


def test_bootstrap_refuses_too_few_prompts_and_says_so():
    with pytest.raises(A.TooFewPrompts, match="4 prompt.*at least 5"):
        A.bootstrap_accept_length([(2, 1)] * 4)


def test_paired_difference_separates_a_real_gap_and_not_noise():
    good = [(20 + i, 10) for i in range(8)]
    bad = [(11 + i % 2, 10) for i in range(8)]
    assert A.bootstrap_difference(good, bad).lo > 0
    same = A.bootstrap_difference(good, good)
    assert same.lo == same.hi == 0
    noisy = [(20 + i + (3 if i % 2 else -3), 10) for i in range(8)]
    assert A.bootstrap_difference(good, noisy).lo <= 0
    with pytest.raises(ValueError, match="8 and 7"):
        A.bootstrap_difference(good, bad[:7])
