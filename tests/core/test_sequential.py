"""The empirical-Bernstein confidence sequence and the paired comparison of two calibrators."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import calibration as cal
from calibration.probability_floor import EPSILON, LOG_BOUND
from calibration.sequential import row_brier, row_nll, verdict


def _by_hand(x: np.ndarray, alpha: float, c: float = 0.5) -> tuple[float, float]:
    """Waudby-Smith & Ramdas (2023) Theorem 2 written as a loop, term by term."""
    log_term = math.log(2 / alpha)
    mean_before, var_before = 0.5, 0.25
    total, sum_x, sum_sq = 0.0, 0.0, 0.0
    bet_sum = weighted = penalty = 0.0
    lower, upper = 0.0, 1.0
    for t, value in enumerate(x, start=1):
        bet = min(math.sqrt(2 * log_term / (var_before * t * math.log(1 + t))), c)
        bet_sum += bet
        weighted += bet * value
        penalty += 4 * (value - mean_before) ** 2 * (-math.log(1 - bet) - bet) / 4
        centre, radius = weighted / bet_sum, (log_term + penalty) / bet_sum
        lower, upper = max(lower, min(max(centre - radius, 0), 1)), min(upper, min(max(centre + radius, 0), 1))
        sum_x += value
        mean = (0.5 + sum_x) / (t + 1)
        sum_sq += (value - mean) ** 2
        total = t
        mean_before, var_before = mean, (0.25 + sum_sq) / (total + 1)
    return lower, upper


def test_the_vectorised_sequence_equals_the_formula_by_hand():
    rng = np.random.default_rng(0)
    x = rng.beta(2, 5, size=300)
    lower, upper = cal.empirical_bernstein_cs(x, alpha=0.1)
    assert (lower[-1], upper[-1]) == pytest.approx(_by_hand(x, 0.1), abs=1e-12)
    assert (lower[40], upper[40]) == pytest.approx(_by_hand(x[:41], 0.1), abs=1e-12)
    stacked_lower, _ = cal.empirical_bernstein_cs(np.stack([x, x[::-1]]), alpha=0.1)
    assert stacked_lower[0] == pytest.approx(lower) and stacked_lower[1, -1] == pytest.approx(
        _by_hand(x[::-1], 0.1)[0])


def test_bounds_shrink_around_the_mean_and_never_cross():
    x = np.random.default_rng(1).uniform(0.2, 0.6, size=20000)
    lower, upper = cal.empirical_bernstein_cs(x, alpha=0.05)
    assert np.all(np.diff(lower) >= 0) and np.all(np.diff(upper) <= 0) and np.all(lower <= upper)
    assert lower[-1] < 0.4 < upper[-1] and upper[-1] - lower[-1] < 0.02


@pytest.mark.parametrize("p", [0.5, 0.1])
def test_time_uniform_coverage(p):
    """Over 2000 Bernoulli(p) streams of 2000 rows, the sequence ever misses p in at most alpha of
    them (a 99% Clopper-Pearson interval of the miss rate does not lie above alpha)."""
    rng = np.random.default_rng(2)
    alpha, streams = 0.1, 2000
    misses = 0
    for _ in range(4):
        x = (rng.random((streams // 4, 2000)) < p).astype(float)
        lower, upper = cal.empirical_bernstein_cs(x, alpha)
        misses += int(((lower[:, -1] > p) | (upper[:, -1] < p)).sum())  # running intersection: ever
    from scipy.stats import beta  # imported on use, as tests.helpers.binomtest says

    lowest = beta.ppf(0.005, misses, streams - misses + 1) if misses else 0.0
    assert lowest <= alpha, misses


def test_per_row_losses_average_to_the_core_metrics():
    rng = np.random.default_rng(3)
    probs = rng.dirichlet(np.ones(5), size=400)
    labels = rng.integers(0, 5, 400)
    assert row_nll(probs, labels).mean() == pytest.approx(cal.nll(probs, labels))
    assert row_brier(probs, labels).mean() == pytest.approx(cal.brier(probs, labels))


def test_a_better_challenger_wins_and_an_identical_one_never_does():
    rng = np.random.default_rng(4)
    n, k = 20000, 4
    logits = rng.normal(size=(n, k)) * 2
    labels = np.array([rng.choice(k, p=row) for row in cal.softmax(logits)])
    true = cal.softmax(logits)
    overconfident = cal.softmax(3 * logits)
    result = cal.compare_losses(true, overconfident, labels, alpha=0.05)
    assert result["verdict"] == "challenger_better" and result["nll"]["confidence_sequence"][1] < 0
    assert cal.compare_losses(overconfident, true, labels)["verdict"] == "champion_better"
    same = cal.compare_losses(true, true, labels)
    assert same["verdict"] == "inconclusive" and same["nll"]["difference"] == 0
    assert verdict(-0.2, 0.1, -0.05) == "inconclusive"
    assert verdict(-0.3, -0.1, 0.02) == "inconclusive"  # the CS alone would say challenger_better


def test_first_crossing_counts_rows():
    upper = np.array([[0.3, 0.1, -0.1, -0.2], [0.3, 0.2, 0.1, 0.05]])
    assert cal.first_crossing(upper).tolist() == [3, 0]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        cal.empirical_bernstein_cs([0.5, 1.5])
    with pytest.raises(ValueError):
        cal.empirical_bernstein_cs([0.5], alpha=1.0)
    with pytest.raises(ValueError):
        cal.difference_cs([0.1], bound=0)
    with pytest.raises(ValueError):
        row_nll(np.ones((2, 2)) / 2, [0, 2])


@st.composite
def heavy_tailed_pairs(draw):
    """A champion from Cauchy logits (exact zeros and probabilities down to 1e-300 among them) and a
    challenger that is better on most rows by ``gap`` nats in the label's logit and gives the label a
    near-zero probability (``tiny``) on a rare share of rows: the pairs whose clipped and plain mean
    differences can have opposite signs (issue #35)."""
    k, n = draw(st.integers(2, 6)), draw(st.integers(1, 600))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    labels = rng.integers(0, k, n)
    logits = draw(st.floats(0.1, 50.0)) * np.clip(rng.standard_cauchy((n, k)), -1e6, 1e6)
    better = logits.copy()
    better[np.arange(n), labels] += draw(st.floats(0.0, 2.0))
    champion, challenger = cal.softmax(logits), cal.softmax(better)
    rare = rng.random(n) < draw(st.floats(0.0, 0.2))
    tiny = draw(st.sampled_from([0.0, 1e-300, 1e-30, 1e-14, 1e-6]))
    challenger[rare] = (1 - tiny) / (k - 1)  # the rest spread over the other classes
    challenger[rare, labels[rare]] = tiny
    if draw(st.booleans()):
        challenger, champion = champion, challenger
    return challenger, champion, labels, draw(st.sampled_from([0.01, 0.05, 0.2, 0.5]))


def _verdict_agrees_with_the_reported_means(challenger, champion, labels, alpha):
    result = cal.compare_losses(challenger, champion, labels, alpha=alpha)
    for loss in ("nll", "brier"):
        shown = result[loss]
        if shown["verdict"] == "challenger_better":
            assert shown["challenger"] < shown["champion"], (loss, shown)
        if shown["verdict"] == "champion_better":
            assert shown["challenger"] > shown["champion"], (loss, shown)
    assert result["verdict"] == result[result["decided_on"]]["verdict"]


@settings(max_examples=400, deadline=None)
@given(heavy_tailed_pairs())
def test_a_verdict_always_agrees_with_the_mean_losses_it_reports(pair):
    """``challenger_better`` implies the challenger's reported mean NLL (and Brier) is the lower;
    ``champion_better`` the reverse."""
    _verdict_agrees_with_the_reported_means(*pair)


def test_a_few_confident_mistakes_outweigh_many_small_gains_in_the_verdict():
    """The issue's case in miniature: the challenger is 0.1 nats better on 1990 rows of 2000 and
    gives the label probability 1e-30 on 10 (floored at EPSILON: 36.04 nats each): its mean NLL is
    0.077 higher. Clipping the differences at +-5 nats made that a ``challenger_better``."""
    n, bad = 2000, 10
    labels = np.zeros(n, dtype=np.int64)
    champion = np.tile([0.5, 0.5], (n, 1))
    challenger = np.tile([0.5 * math.exp(0.1), 1 - 0.5 * math.exp(0.1)], (n, 1))
    challenger[:bad] = [1e-30, 1.0]
    result = cal.compare_losses(challenger, champion, labels, alpha=0.05)
    assert result["nll"]["challenger"] > result["nll"]["champion"]
    assert result["nll"]["verdict"] != "challenger_better" and result["verdict"] != "challenger_better"
    expected = (bad * -math.log(EPSILON) - (n - bad) * 0.1) / n  # the floor at EPSILON: 36.04 nats
    assert result["nll"]["difference"] == pytest.approx(expected - bad * math.log(2) / n, rel=1e-12)


def test_the_nll_confidence_sequence_covers_the_floored_mean_without_clipping():
    assert cal.compare_losses(np.array([[0.0, 1.0]]), np.array([[1.0, 0.0]]), [0])["nll"]["bound"] == LOG_BOUND
    with pytest.raises(ValueError):
        cal.difference_cs([LOG_BOUND + 1.0], bound=LOG_BOUND)
