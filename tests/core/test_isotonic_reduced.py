"""Issue #19: the isotonic fit that sends PAVA only the clusters holding a positive and the ends
of the runs without one, and never forms per-score float arrays beyond the sorted scores, gives
the knots of the plain fit (PAVA on every cluster, the clusters scikit-learn's ``_make_unique``
makes) bit for bit."""

import numpy as np
import pytest
from scipy.optimize import isotonic_regression
from sklearn._isotonic import _make_unique

import calibration as cal
from calibration.methods.isotonic_knots import fit_isotonic_binary
from tests.helpers import DATASETS, load_split


def plain_fit(x, positive):
    """Knots of PAVA on one value per cluster, the clusters and their mean targets made by
    scikit-learn's ``_make_unique`` after its sort (``IsotonicRegression._build_y``)."""
    order = np.lexsort((positive, x))
    values, targets, counts = _make_unique(x[order], positive[order].astype(np.float64), np.ones(len(x)))
    fitted = isotonic_regression(targets, weights=counts).x
    if len(values) <= 2:
        return values, fitted
    inner = (fitted[1:-1] != fitted[:-2]) | (fitted[1:-1] != fitted[2:])
    keep = np.concatenate([[True], inner, [True]])
    return values[keep], fitted[keep]


def assert_same(x, positive):
    xs, ys = fit_isotonic_binary(x, positive)
    plain_xs, plain_ys = plain_fit(x, positive)
    np.testing.assert_array_equal(xs, plain_xs)
    np.testing.assert_array_equal(ys, plain_ys)


@pytest.mark.parametrize("seed", range(40))
def test_random_scores_with_repeats_near_ties_and_sparse_positives(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    x = rng.random(n) ** rng.uniform(1, 20)  # many tiny scores, clustered near 0
    if seed % 3 == 0:
        x = np.round(x, int(rng.integers(2, 6)))  # many repeats
    if seed % 3 == 1:  # chains of near ties (0 to 7 ulps of 0.3 apart), wider than one cluster (walked greedily)
        x[: n // 2] = rng.choice([1e-12, 0.3]) + np.cumsum(rng.uniform(0, 4e-16, n // 2))
    positive = rng.random(n) < rng.choice([0.0, 0.001, 0.05, 0.5, 1.0])
    assert_same(x, positive)


def test_small_edge_cases():
    assert_same(np.array([0.3]), np.array([True]))
    assert_same(np.array([0.3, 0.3]), np.array([False, False]))
    assert_same(np.array([0.1, 0.2, 0.3]), np.array([False, False, False]))
    assert_same(np.array([0.1, 0.2, 0.3]), np.array([False, True, False]))
    assert_same(np.array([0.5, 0.1, 0.2, 0.3, 0.9]), np.array([True, False, False, True, False]))


@pytest.mark.parametrize("name", DATASETS)
def test_real_sets_irm_and_irova(name):
    kind, x, labels = load_split(name, "val")
    batch = cal.validate_inputs(x, kind)
    p = batch.probabilities
    positive = np.arange(batch.k)[None, :] == labels[:, None]
    irm = cal.IsotonicMulticlass(input=kind).fit(x, labels)
    plain_xs, plain_ys = plain_fit(p.ravel(), positive.ravel())
    np.testing.assert_array_equal(irm.knots_x_, plain_xs)
    np.testing.assert_array_equal(irm.knots_y_, plain_ys)
    irova = cal.IsotonicOneVsAll(input=kind).fit(x, labels)
    for j in range(batch.k):
        plain_xs, plain_ys = plain_fit(p[:, j], labels == j)
        np.testing.assert_array_equal(irova.knots_[j][0], plain_xs)
        np.testing.assert_array_equal(irova.knots_[j][1], plain_ys)
