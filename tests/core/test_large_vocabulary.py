"""Fits at LLM vocabularies (tens of thousands of classes, a few hundred rows): ensemble
temperature scaling's Brier temperature comes from Halley's method started in a subsample's
basin, as on many rows, not from two dozen evaluations of the full-data grid, and equals the
grid's answer; its weights are the exact minimum of the quadratic at that temperature."""

import copy

import numpy as np
import pytest

import calibration as cal
from calibration.base import Calibrator
from calibration.inputs import validate_inputs
from calibration.methods.brier_temperature import BrierSums
from calibration.methods.ensemble_temperature import simplex_quadratic_minimum
from calibration.methods.shifted_logits import ShiftedLogits
from calibration.methods.temperature import solve_brier_temperature, solve_nll_temperature
from calibration.probability_floor import EPSILON
from calibration.solvers import increasing_root


def vocabulary_set(n=340, k=50000, seed=11, temperature=2.0):
    """float32 logits 3 N(0, 1) and labels drawn from their softmax at ``temperature``. 340 x 50000:
    1.7e7 entries, above the 1.64e7 (``brier_temperature.is_large``) where ETS solves from subsamples."""
    rng = np.random.default_rng(seed)
    logits = (3.0 * rng.standard_normal((n, k))).astype(np.float32)
    labels = np.empty(n, dtype=np.int64)
    for i, row in enumerate(logits):
        e = np.exp(row.astype(np.float64) / temperature)
        labels[i] = min(int(np.searchsorted(np.cumsum(e / e.sum()), rng.random())), k - 1)
    return logits, labels


@pytest.fixture(scope="module")
def vocabulary():
    return vocabulary_set()


@pytest.fixture(scope="module")
def vocabulary_ets(vocabulary):
    """ETS fitted on ``vocabulary`` (a test that changes it takes a copy)."""
    return cal.EnsembleTemperatureScaling().fit(*vocabulary)


def test_ets_at_a_large_vocabulary_takes_halley_from_a_subsample_and_finds_the_grids_temperature(
        vocabulary, vocabulary_ets):
    logits, labels = vocabulary
    ets = vocabulary_ets
    assert "Halley" in ets.diagnostics_.message and ets.diagnostics_.converged
    assert ets.diagnostics_.iterations <= 6  # full-data passes of the solve (the grid took 35)
    shifted = ShiftedLogits(logits, labels)
    t_grid, diagnostics = solve_brier_temperature(shifted)
    assert diagnostics.converged
    assert ets.temperature_ == pytest.approx(t_grid, rel=1e-12)
    assert abs(BrierSums(shifted, 1 / ets.temperature_).slope) < 1e-12
    gram, linear = BrierSums(shifted, 1 / ets.temperature_, quadratic=True).quadratic()
    np.testing.assert_allclose(ets.weights_, simplex_quadratic_minimum(gram, linear), rtol=0, atol=1e-12)


def test_a_root_hit_to_the_last_bit_ends_the_solve():
    """A step below half an ulp leaves the iterate where it is; that is convergence, not a step
    outside the bracket to be replaced by bisection (which took 30 more evaluations, each a pass
    over the logits)."""
    root = increasing_root(lambda x: (x - 0.5 + 1e-17, 1.0), 0.5, 1e-6, 1e6)
    assert root.converged and root.x == 0.5 and root.iterations == 1


def test_the_nll_temperature_of_a_few_rows_of_a_large_vocabulary_takes_a_few_halley_steps(vocabulary):
    logits, labels = vocabulary
    shifted = ShiftedLogits(logits[:64], labels[:64])
    t, diagnostics = solve_nll_temperature(shifted)
    assert diagnostics.converged and diagnostics.iterations <= 6
    assert abs(shifted.nll_gradient(1 / t)[0]) < 1e-12


def test_ets_floor_counts_without_a_prediction_pass_equal_those_of_the_predictions(vocabulary, vocabulary_ets):
    logits, labels = vocabulary
    ets = copy.deepcopy(vocabulary_ets)  # its weights are set below
    tiny = logits[:20].copy()
    tiny[:, 0] = -1e4  # an entry far below the floor in every row
    batch = validate_inputs(tiny, "logits")
    ets.weights_ = np.array([0.9, 0.05, 0.05])  # every entry at least 0.05 / k: the shortcut's case
    assert ets.weights_[2] / tiny.shape[1] >= EPSILON
    assert ets._floor_counts(batch, labels[:20]) == Calibrator._floor_counts(ets, batch, labels[:20]) == (0, 0)
    ets.weights_ = np.array([0.5, 0.5, 0.0])  # no uniform weight: the predictions are read
    assert ets._floor_counts(batch, labels[:20]) == (20, 0)


def counting_predictions(ets):
    """``ets`` with its ``_predict`` wrapped to record how many rows each call predicts."""
    predicted = []
    original = ets._predict
    ets._predict = lambda scores: (predicted.append(scores.n), original(scores))[1]
    return predicted


def test_ets_floor_counts_predict_only_the_rows_the_bound_does_not_clear(vocabulary, vocabulary_ets):
    """Without a uniform weight, the rows whose smallest prediction is bounded above the floor by
    their smallest and largest logits are not predicted: here 5 of 40 rows are."""
    logits, labels = vocabulary
    ets = copy.deepcopy(vocabulary_ets)
    ets.weights_ = np.array([0.5, 0.5, 0.0])
    rows = logits[:40].copy()
    rows[:5, 0] = -1e4  # an entry far below the floor in 5 rows
    batch = validate_inputs(rows, "logits")
    assert Calibrator._floor_counts(ets, batch, labels[:40]) == (5, 0)
    predicted = counting_predictions(ets)
    assert ets._floor_counts(batch, labels[:40]) == (5, 0)
    assert sum(predicted) == 5


@pytest.mark.parametrize("weights", [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.3, 0.7, 0.0)])
def test_ets_floor_counts_equal_the_predictions_across_the_floor(weights):
    """Rows with one low logit ``c`` (the others 0, ``k = 1000``, ``t = 1.5``) whose smallest
    prediction runs from below the floor to above it: the counts equal those of the predictions."""
    k, t = 1000, 1.5
    ets = cal.EnsembleTemperatureScaling()
    ets.temperature_, ets.weights_ = t, np.array(weights)
    threshold = np.log(EPSILON * k)  # exp(c) / k at the floor: c ~ -29
    low = threshold * np.linspace(0.9, 1.8, 400)
    rows = np.zeros((len(low), k))
    rows[:, 0] = low
    labels = np.arange(len(low)) % k
    batch = validate_inputs(rows, "logits")
    exact = Calibrator._floor_counts(ets, batch, labels)
    assert 0 < exact[0] < len(low)  # some rows on each side of the floor
    predicted = counting_predictions(ets)
    assert ets._floor_counts(batch, labels) == exact
    assert 0 < sum(predicted) < len(low)


@pytest.mark.parametrize("method", [cal.TemperatureScaling, cal.ExpectationConsistency])
def test_temperature_floor_counts_equal_the_predictions_across_the_floor(method):
    """As for ETS: rows with one low logit ``c`` (the others 0, ``k = 1000``, ``T = 1.5``) on both
    sides of the floor, float32 as served; only rows the bound does not clear are predicted."""
    k, t = 1000, 1.5
    fitted = method()
    fitted.temperature_ = t
    low = t * np.log(EPSILON * k) * np.linspace(0.9, 1.2, 300)  # exp(c / T) / k at the floor: c ~ -43
    rows = np.zeros((len(low), k), dtype=np.float32)
    rows[:, 0] = low
    labels = np.arange(len(low)) % k
    batch = validate_inputs(rows, "logits")
    exact = Calibrator._floor_counts(fitted, batch, labels)
    assert 0 < exact[0] < len(low)
    predicted = counting_predictions(fitted)
    assert fitted._floor_counts(batch, labels) == exact
    assert 0 < sum(predicted) < len(low)
