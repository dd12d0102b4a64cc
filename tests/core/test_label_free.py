"""The label-free alarm against an estimated reference (calibration.label_free): its false-alarm
probability stays below alpha for any reference size (many simulated streams, a binomial test),
its radii hold at their level, and ``rows_needed`` inverts the radius."""

from __future__ import annotations

import numpy as np
import pytest

from calibration.label_free import label_free_test, reference_of, residuals, rows_needed
from calibration.monitoring import DriftTest, label_free_residuals
from tests.helpers import binomtest

STREAMS, ROWS, ALPHA = 300, 2000, 0.05


def population(k: int = 4, size: int = 20_000, seed: int = 12) -> np.ndarray:
    """Calibrated-looking probabilities of a fixed population (peaked rows, as a classifier's)."""
    return np.random.default_rng(seed).dirichlet(np.full(k, 0.3), size=size)


@pytest.mark.parametrize("reference_rows", [100, 300])
def test_no_shift_small_reference_keeps_alpha(reference_rows):
    """Stream and reference drawn from the same population, each stream with its own reference of
    ``reference_rows`` rows: the share of streams that ever alarm is not significantly above alpha.
    (Against the reference's plain means at tolerance 0.02 most streams alarm: the reference's
    sampling error, about 0.4 / sqrt(n_ref), is larger than the tolerance.)"""
    rng = np.random.default_rng(reference_rows)
    pool = population()
    alarms = 0
    for _ in range(STREAMS):
        test, reference = label_free_test(pool[rng.integers(0, len(pool), reference_rows)], alpha=ALPHA)
        alarms += bool(test.update(*residuals(pool[rng.integers(0, len(pool), ROWS)], reference)).alarmed)
    assert binomtest(alarms, STREAMS, ALPHA, alternative="greater").pvalue > 0.01, alarms


def test_the_plain_reference_loses_alpha():
    """The unwidened game (the reference's means taken as the population's) at the same alpha."""
    rng = np.random.default_rng(1)
    pool = population()
    alarms = 0
    for _ in range(100):
        reference = pool[rng.integers(0, len(pool), 100)]
        test = DriftTest(alpha=ALPHA, n_classes=4)
        alarms += bool(test.update(*label_free_residuals(pool[rng.integers(0, len(pool), ROWS)],
                                                         reference.max(axis=1).mean(), reference.mean(axis=0))).alarmed)
    assert binomtest(alarms, 100, ALPHA, alternative="greater").pvalue < 1e-3, alarms


def test_a_prior_shift_still_alarms_with_a_small_reference():
    rng = np.random.default_rng(2)
    pool = population()
    test, reference = label_free_test(pool[rng.integers(0, len(pool), 300)], alpha=0.01)
    shifted = pool[pool.argmax(axis=1) == 0]  # only rows predicted as class 0
    test.update(*residuals(shifted[rng.integers(0, len(shifted), 3000)], reference))
    assert test.alarmed and test.alarm_at < 1000


def test_the_radii_cover_the_population_means():
    """Each radius holds at its level: over 200 references of 100 rows, the population's means are
    inside every bound far more often than 1 - alpha."""
    rng = np.random.default_rng(3)
    pool = population()
    truth = np.concatenate([[pool.max(axis=1).mean()], pool.mean(axis=0)])
    missed = 0
    for _ in range(200):
        reference = reference_of(pool[rng.integers(0, len(pool), 100)], alpha=0.2)
        estimate = np.concatenate([[reference.confidence], reference.mean])
        radius = np.concatenate([[reference.confidence_radius], reference.class_radius])
        missed += bool((np.abs(estimate - truth) > radius).any())
    assert missed <= 200 * 0.2
    assert reference.to_dict() == reference.from_dict(reference.to_dict()).to_dict()


def test_the_split_and_the_widened_tolerances():
    test, reference = label_free_test(population()[:500], alpha=0.02, tolerance=0.01, class_tolerance=0.03)
    assert test.alpha == pytest.approx(0.01) and reference.alpha == pytest.approx(0.01)
    assert test.tolerance == pytest.approx(0.01 + reference.confidence_radius)
    np.testing.assert_allclose(test.class_tolerance, 0.03 + reference.class_radius)
    assert DriftTest.from_dict(test.to_dict()).to_dict() == test.to_dict()
    with pytest.raises(ValueError, match="share"):
        label_free_test(population()[:10], share=1.0)


def test_rows_needed_inverts_the_radius():
    n = rows_needed(0.1, tolerance=0.02, alpha=0.01, sd=0.25)
    assert n is not None and n > 10
    assert rows_needed(0.02, tolerance=0.02) is None
    assert rows_needed(0.2, tolerance=0.02, sd=0.25) < n < rows_needed(0.05, tolerance=0.02, sd=0.25)
    x = np.where(np.arange(n) % 2 == 0, 1.0, 0.5)  # confidences of spread 0.25: the radius at n rows is 0.08
    rows = np.column_stack([x, 1 - x])
    assert reference_of(rows, 0.005).confidence_radius == pytest.approx(0.08, abs=0.005)


def test_per_class_tolerances_by_hand():
    """Two steps of the class game with eps_c = (0.1, 0.3): the second step's stakes are the plug-in
    bets of the first residual's exponential means, and it pays sum_j l_j r_j - sum_j |l_j| eps_cj."""
    test = DriftTest(alpha=0.1, tolerance=0.0, half_life=1.0, n_classes=2, class_tolerance=[0.1, 0.3])
    first, second = np.array([[0.6, -0.6]]), np.array([[0.5, -0.5]])
    test.update([0.0, 0.0], np.concatenate([first, second]))
    mean, square = 0.5 * first[0], 0.5 * 0.25 + 0.5 * first[0] ** 2  # keep = 2^-1: m_1 = x_1 / 2
    raw = np.sign(mean) * np.maximum(np.abs(mean) - [0.1, 0.3], 0) / square
    stakes = raw * min(1.0, 0.5 / np.abs(raw).sum())
    gain = (stakes * second[0]).sum() - (np.abs(stakes) * [0.1, 0.3]).sum()
    assert test.class_log_wealth == pytest.approx(np.log1p(gain))
    with pytest.raises(ValueError, match="class_tolerance"):
        DriftTest(n_classes=3, class_tolerance=[0.1, 0.2])
