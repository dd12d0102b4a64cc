"""Issue #19: cross-validation and the isotonic and ETS maps without n x k float64 temporaries
beyond the ones they return; the blocked computations equal the whole-matrix formulas bit for bit,
and the traced peaks stay within a few times the input's bytes (they were 8x and 15x)."""

import numpy as np
import pytest

import calibration as cal
from calibration.base import normalise_rows
from calibration.comparison import held_out
from calibration.inputs import InputBatch
from calibration.methods.isotonic import STRICT_SLOPE, interpolate_monotone, softmax_columns
from calibration.metrics.binned import ece
from calibration.metrics.kde import kde_ece
from calibration.metrics.scores import TINY, UNSUPPORTED_RATIO, accuracy, brier, mean_tail_risk, nll, tail_risk
from calibration.probability_floor import floor_probabilities
from tests.core.memory import synthetic, traced_peak

NAMES = ["temperature", "ensemble_temperature", "expectation_consistency", "isotonic_multiclass",
         "isotonic_one_vs_all", "irova_ts"]


def test_compare_peak_is_a_few_times_the_input():
    """Held during the folds: a fold's training and test rows and its reference (1.2x the float64
    input); the largest candidate adds IROvA-TS's two training-set predictions (1.6x). 2.9x; 6.4x
    without the collection after each fold. 50 classes: the per-class isotonic fits are most of the
    time, and the peak is a ratio of the input's bytes, the same at 2000 x 200."""
    logits, labels = synthetic(8000, 50)
    peak = traced_peak(lambda: cal.compare(logits, labels, NAMES))
    assert peak < 3.5 * logits.nbytes


def test_irm_fit_peak_is_its_sorted_copy_and_flags():
    logits, labels = synthetic(3000, 300, seed=1)
    batch = cal.validate_inputs(logits, "logits")
    peak = traced_peak(lambda: cal.IsotonicMulticlass().fit_batch(batch, labels))
    assert peak < 2.0 * logits.nbytes  # the sorted copy (1x), a flag per entry, int32 cluster starts


@pytest.mark.parametrize("kind", ["logits", "probabilities"])
def test_blocked_predictions_equal_the_whole_matrix_formulas(kind):
    logits, labels = synthetic(3000, 300, seed=2)  # 900000 entries: several row blocks
    x = cal.softmax(logits) if kind == "probabilities" else logits
    batch = InputBatch(**{kind: x})
    ets = cal.create("ensemble_temperature", {"input": kind}).fit(x, labels)
    w1, w2, w3 = ets.weights_
    whole = w1 * cal.softmax(batch.logits / ets.temperature_) + w2 * batch.probabilities + w3 / batch.k
    np.testing.assert_array_equal(ets.predict_batch(InputBatch(**{kind: x})), floor_probabilities(whole)[0])
    irm = cal.create("isotonic_multiclass", {"input": kind}).fit(x, labels)
    p = batch.probabilities
    whole = normalise_rows(interpolate_monotone(p, irm.knots_x_, irm.knots_y_) + STRICT_SLOPE * p)
    np.testing.assert_array_equal(irm.predict_batch(InputBatch(**{kind: x})), floor_probabilities(whole)[0])
    irova = cal.create("isotonic_one_vs_all", {"input": kind}).fit(x, labels)
    whole = normalise_rows(np.stack([interpolate_monotone(p[:, j], xs, ys)
                                     for j, (xs, ys) in enumerate(irova.knots_)], axis=1))
    np.testing.assert_array_equal(irova.predict_batch(InputBatch(**{kind: x})), floor_probabilities(whole)[0])


def test_blocked_tail_risk_equals_the_whole_matrix_formula():
    rng = np.random.default_rng(3)
    reference = cal.softmax(rng.standard_normal((1500, 500)))  # 750000 entries: two row blocks
    calibrated = cal.softmax(4 * rng.standard_normal((1500, 500)))
    calibrated[rng.random(calibrated.shape) < 0.01] = 0.0
    small = calibrated < UNSUPPORTED_RATIO * reference
    c, r = np.maximum(calibrated[small], TINY), reference[small]
    assert tail_risk(calibrated, reference) == float(np.sum(r * np.log(r / c)) / len(calibrated))


@pytest.mark.parametrize("k", [2, 400])
def test_held_out_metrics_by_row_blocks_equal_the_whole_matrix_metrics(k):
    """The comparison's held-out metrics and tail-risk terms, made block by block (``held_out``),
    are the metric functions' values on the whole matrix, bit for bit (k = 2: KDE-ECE on class 1)."""
    logits, labels = synthetic(6000 if k == 2 else 3000, k, seed=4)  # 1.2e6 entries: three row blocks
    irm = cal.create("isotonic_multiclass", {"input": "logits"}).fit(logits, labels)  # zeros: tail-risk terms
    ts = cal.create("temperature", {"input": "logits"}).fit(logits, labels)
    measured, terms = held_out(logits, labels, "logits", irm.predict_batch, ts.predict_batch)
    calibrated, reference = irm.predict_proba(logits), ts.predict_proba(logits)
    assert {m: measured[m] for m in ("nll", "brier", "ece", "kde_ece", "accuracy")} == {
        "nll": nll(calibrated, labels), "brier": brier(calibrated, labels), "ece": ece(calibrated, labels),
        "kde_ece": kde_ece(calibrated, labels), "accuracy": accuracy(calibrated, labels)}
    assert len(terms) and mean_tail_risk(terms, len(labels)) == tail_risk(calibrated, reference)
    with pytest.raises(ValueError, match="probabilities"):  # checked as the metric functions check them
        held_out(logits, labels, "logits", lambda rows: rows.probabilities * 1.5)


def test_held_out_probabilities_are_never_held_whole():
    """TS alone on rows laid out in place (views): the comparison then holds row blocks, not the
    held-out fold's uncalibrated, reference and calibrated probabilities (each 0.5x the input with
    two folds). Two folds, not five: the same blocked path at half the fits, and a wider gap."""
    logits, labels = synthetic(40000, 200, seed=6)  # a held-out fold of 20000 rows: 8 row blocks
    cal.allow_reordering(logits)
    peak = traced_peak(lambda: cal.compare(logits, labels, ["temperature"], folds=2))
    assert peak < 0.3 * logits.nbytes  # 0.25x; 1.71x with whole held-out matrices (0.70x with five folds)


def test_irova_fits_on_softmax_columns_as_on_the_whole_softmax_with_a_smaller_peak():
    """IROvA on logits makes a few columns of their softmax at a time (``softmax_columns``): the
    same columns bit for bit, so the same knots, without the (n, k) probabilities."""
    logits, labels = synthetic(20000, 200, seed=8)  # 4e6 entries: 8 row blocks, 20000 x 26 column blocks
    np.testing.assert_array_equal(np.concatenate([b for _, b in softmax_columns(logits)], axis=1), cal.softmax(logits))
    whole = cal.validate_inputs(logits, "logits")
    assert whole.probabilities.shape == logits.shape  # made now: the fit reads them whole
    expected = cal.create("isotonic_one_vs_all", {"input": "logits"}).fit_batch(whole, labels)
    batch = cal.validate_inputs(logits, "logits")
    fitted = cal.create("isotonic_one_vs_all", {"input": "logits"})
    peak = traced_peak(lambda: fitted.fit_batch(batch, labels))
    for (xs, ys), (expected_xs, expected_ys) in zip(fitted.knots_, expected.knots_, strict=True):
        np.testing.assert_array_equal(xs, expected_xs)
        np.testing.assert_array_equal(ys, expected_ys)
    assert "probabilities" not in batch.__dict__ and peak < 0.5 * logits.nbytes  # 0.36x; 1.0x with the whole softmax
