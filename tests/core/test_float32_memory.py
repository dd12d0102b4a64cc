"""Fits and predictions on float32 numpy logits read them a block of rows at a time (widened
to float64, which is exact): no float64 copy of the whole batch, and the same fitted parameters
and probabilities as on the float64 copy, to the bit."""

import tracemalloc

import numpy as np
import pytest

import calibration as cal


def float32_set(n, k, seed=0):
    rng = np.random.default_rng(seed)
    logits = (2.0 * rng.standard_normal((n, k))).astype(np.float32)
    labels = rng.integers(0, k, n)
    labels[: n // 2] = logits[: n // 2].argmax(axis=1)
    return logits, labels


def peak_of(call):
    """Result of ``call()`` and the peak bytes it allocated (tracemalloc)."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


FITS = [("temperature", {}, 20000, 300), ("expectation_consistency", {}, 20000, 300),
        ("ensemble_temperature", {}, 20000, 300), ("ensemble_temperature", {"loss": "nll"}, 20000, 300),
        ("vector", {}, 50000, 100),  # vector: its 4 MiB row blocks small beside the input
        ("isotonic_multiclass", {}, 15000, 300)]  # IRM streamed (n k > STREAM_ABOVE): softmax row blocks


@pytest.mark.parametrize(("method", "options", "n", "k"), FITS, ids=[f"{m}-{o}" for m, o, *_ in FITS])
def test_float32_fit_holds_no_float64_copy_and_equals_the_float64_fit(method, options, n, k):
    logits, labels = float32_set(n, k)
    wide = cal.create(method, options).fit(logits.astype(np.float64), labels)
    narrow, peak = peak_of(lambda: cal.create(method, options).fit(logits, labels))
    assert peak < 1.5 * logits.nbytes  # a float64 copy alone is 2x
    assert narrow.to_dict()["params"] == wide.to_dict()["params"]


@pytest.mark.parametrize("method", ["ensemble_temperature", "vector"])
def test_float32_prediction_holds_no_float64_copy_beside_its_output(method):
    logits, labels = float32_set(50000, 100, seed=1)
    fitted = cal.create(method).fit(logits[20000:40000], labels[20000:40000])
    expected = fitted.predict_proba(logits.astype(np.float64))
    probabilities, peak = peak_of(lambda: fitted.predict_proba(logits))
    assert peak < 2.5 * logits.nbytes  # the float64 output is 2x; with a float64 copy of the input 4x
    np.testing.assert_array_equal(probabilities, expected)


def test_ets_from_float32_probabilities_predicts_as_from_their_float64_copy():
    logits, labels = float32_set(3000, 20, seed=2)
    probabilities = cal.softmax(logits.astype(np.float64)).astype(np.float32)
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    fitted = cal.EnsembleTemperatureScaling(input="probabilities").fit(probabilities, labels)
    wide = cal.EnsembleTemperatureScaling(input="probabilities").fit(probabilities.astype(np.float64), labels)
    assert fitted.to_dict()["params"] == wide.to_dict()["params"]
    np.testing.assert_array_equal(fitted.predict_proba(probabilities),
                                  wide.predict_proba(probabilities.astype(np.float64)))


METRICS = ["ece", "mce", "adaptive_ece", "classwise_ece", "brier", "nll", "accuracy", "mean_confidence"]


@pytest.fixture(scope="module")
def float32_probabilities():
    logits, labels = float32_set(20000, 300, seed=4)
    p = cal.softmax(logits.astype(np.float64) * 1.5).astype(np.float32)
    p[3] = 0
    p[3, labels[3]] = 1  # a confidence of exactly 1, ties at 0
    p[4] = np.where(p[4] == 0, np.float32(-0.0), p[4])
    p[5, labels[5]] = 0  # a label of probability 0: the NLL's floor
    p[5] /= p[5].sum()
    return p, labels


@pytest.mark.parametrize("metric", METRICS)
def test_metrics_of_float32_probabilities_hold_no_float64_copy_and_equal_the_float64_metrics(
        metric, float32_probabilities):
    p, labels = float32_probabilities
    function = getattr(cal, metric)
    expected = function(p.astype(np.float64), labels)
    value, peak = peak_of(lambda: function(p, labels))
    assert peak < 0.5 * p.nbytes  # a float64 copy alone is 2x
    if metric == "classwise_ece":  # column totals added a block at a time: rounding only
        assert value == pytest.approx(expected, rel=1e-12, abs=0)
    else:
        assert value == expected


@pytest.mark.parametrize("metric", ["classwise_ece", "brier", "nll", "accuracy", "mean_confidence"])
def test_float32_metrics_refuse_negative_entries_naming_the_row(metric, float32_probabilities):
    p, labels = float32_probabilities
    bad = p[:50].copy()
    bad[17, 0] -= np.float32(0.5)
    bad[17, 1] += np.float32(0.5)
    with pytest.raises(ValueError, match="row 17"):
        getattr(cal, metric)(bad, labels[:50])


PROBABILITY_FITS = [("temperature", {}), ("expectation_consistency", {}), ("ensemble_temperature", {}),
                    ("ensemble_temperature", {"loss": "nll"})]


@pytest.mark.parametrize(("method", "options"), PROBABILITY_FITS, ids=[f"{m}-{o}" for m, o in PROBABILITY_FITS])
def test_fits_on_float32_probabilities_take_their_logs_a_block_at_a_time(method, options):
    """The logits of probabilities, ``log(max(p, 1e-12))``, are computed for the rows a pass reads:
    no float64 copy of the probabilities nor of their logs (together 4x the float32 input), and the
    parameters of the fit on those logits given as logits."""
    logits, labels = float32_set(20000, 300, seed=6)
    p = cal.softmax(logits.astype(np.float64)).astype(np.float32)
    p[7] = 0
    p[7, labels[7]] = 1  # entries of 0: logs at the floor
    wide_logs = np.log(np.clip(p.astype(np.float64), 1e-12, None))
    expected = cal.create(method, options).fit(wide_logs, labels)
    del wide_logs
    fitted, peak = peak_of(lambda: cal.create(method, {**options, "input": "probabilities"}).fit(p, labels))
    assert peak < 1.5 * p.nbytes
    assert fitted.to_dict()["params"] == expected.to_dict()["params"]
