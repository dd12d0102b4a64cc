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
        ("vector", {}, 50000, 100)]  # vector: its 4 MiB row blocks small beside the input


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
