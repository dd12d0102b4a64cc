"""Coverage of prediction sets per window (app.monitoring.coverage): hand-computed Wilson intervals,
set sizes and the sets of the core's set predictor on real model outputs."""

from __future__ import annotations

import numpy as np
import pytest

import calibration as cal
from app.monitoring import coverage
from tests.helpers import conformal_probabilities


def test_summary_of_a_window_holds_the_wilson_interval_and_the_set_sizes():
    """9 of 10 covered: Wilson's 95% interval is [0.5958, 0.9821] (statsmodels' proportion_confint(9, 10,
    method="wilson") gives 0.595850, 0.982123); sizes 1,1,2,2,2,3,0,1,1,1 of 3 classes."""
    covered = np.array([1, 1, 1, 1, 1, 1, 0, 1, 1, 1], dtype=bool)
    sizes = np.array([1, 1, 2, 2, 2, 3, 0, 1, 1, 1])
    out = coverage.coverage_summary(covered, sizes, 3)
    assert out["n_rows"] == 10
    assert out["coverage"]["estimate"] == 0.9
    assert out["coverage"]["low"] == pytest.approx(0.595850, abs=1e-6)
    assert out["coverage"]["high"] == pytest.approx(0.982123, abs=1e-6)
    assert out["mean_set_size"] == pytest.approx(1.4)
    assert out["size_counts"] == [1, 5, 3, 1]
    empty = coverage.coverage_summary(covered[:0], sizes[:0], 3)
    assert empty["coverage"]["estimate"] is None and empty["size_counts"] == [0, 0, 0, 0]


def test_windows_of_real_sets_match_the_core_and_hold_their_level():
    """APS sets at alpha 0.1 fitted on CIFAR-100 validation rows, on the test rows in windows of 1000:
    each window's numbers are the core's on its rows, and the pooled coverage is >= 0.9 - sampling error."""
    probs, labels = conformal_probabilities("cifar100_densenet-bc-100", "val")
    test, test_labels = conformal_probabilities("cifar100_densenet-bc-100", "test")
    predictor = cal.SetPredictor.fit(probs, labels, score="aps", alphas=[0.1, 0.2])
    covered, sizes = coverage.set_outcomes(predictor, test, test_labels, 0.1)
    window_of = np.arange(len(test_labels)) // 1000
    keys = sorted(set(window_of.tolist()))
    out = coverage.coverage_by_window(window_of, keys, covered, sizes, 100)
    for key in keys:
        rows = window_of == key
        estimate, size = cal.coverage_and_size(predictor.predict_sets(test[rows], 0.1), test_labels[rows])
        assert out[key]["coverage"]["estimate"] == pytest.approx(estimate)
        assert out[key]["mean_set_size"] == pytest.approx(size)
        assert out[key]["coverage"]["low"] <= estimate <= out[key]["coverage"]["high"]
    assert covered.mean() >= 0.9 - 2 * np.sqrt(0.09 / len(covered))
    wider, _ = coverage.set_outcomes(predictor, test, test_labels, 0.2)
    assert wider.mean() < covered.mean()
