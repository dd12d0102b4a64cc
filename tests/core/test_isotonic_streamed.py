"""Issue #19: IRM's knots from one value range of the scores at a time (``isotonic_streamed``) are
``isotonic_knots``' on the whole sorted array, bit for bit, for any number of ranges and block
size and chunk of runs, on tie-heavy scores too; and IRM's fit above ``STREAM_ABOVE`` equals the in-memory fit."""

import numpy as np
import pytest

import calibration as cal
from calibration.methods import isotonic
from calibration.methods.isotonic_knots import BLOCK, isotonic_knots
from calibration.methods.isotonic_streamed import streamed_knots
from tests.core.memory import synthetic, traced


def scores(kind: str, n: int, rng) -> np.ndarray:
    if kind == "uniform":
        return rng.random(n)
    if kind == "rounded":  # many exact ties
        return np.round(rng.random(n), 3)
    if kind == "dense":  # runs wider than one cluster: walked
        return 0.5 + rng.random(n) * 2e-5
    return np.exp(-30 * rng.random(n))  # softmax-like: most mass near 0


@pytest.mark.parametrize("kind", ["uniform", "rounded", "dense", "tiny"])
def test_streamed_knots_equal_the_whole_array_s(kind):
    rng = np.random.default_rng(["uniform", "rounded", "dense", "tiny"].index(kind))
    for _ in range(6):
        n = int(rng.integers(2, 60000))
        x = scores(kind, n, rng)
        positives = x[rng.random(n) < rng.random()]
        positives = positives if len(positives) else x[:1]
        size = int(rng.integers(1, 20000))
        expected = isotonic_knots(np.sort(x), positives)
        for ranges, chunk in ((1, BLOCK), (3, 3), (8, 997), (17, 50)):
            got = streamed_knots(lambda x=x, size=size: (x[a:a + size] for a in range(0, len(x), size)), n,
                                 positives, ranges, chunk=chunk)
            np.testing.assert_array_equal(got[0], expected[0])
            np.testing.assert_array_equal(got[1], expected[1])


@pytest.mark.parametrize("kind", ["logits", "probabilities"])
def test_irm_streamed_fit_equals_the_in_memory_fit_with_a_smaller_peak(kind, monkeypatch):
    logits, labels = synthetic(4000, 800, seed=7)  # 3.2e6 scores: 7 row blocks
    x = cal.softmax(logits) if kind == "probabilities" else logits
    batch = cal.validate_inputs(x, kind)
    in_memory, whole = traced(lambda: cal.create("isotonic_multiclass", {"input": kind}).fit_batch(batch, labels))
    monkeypatch.setattr(isotonic, "STREAM_ABOVE", 0)
    streamed, peak = traced(lambda: cal.create("isotonic_multiclass", {"input": kind}).fit_batch(batch, labels))
    np.testing.assert_array_equal(streamed.knots_x_, in_memory.knots_x_)
    np.testing.assert_array_equal(streamed.knots_y_, in_memory.knots_y_)
    assert peak < 0.75 * whole


def test_streamed_knots_take_minus_infinity_as_the_sorted_array_does_and_refuse_nan():
    rng = np.random.default_rng(5)
    x = rng.random(1000)
    x[5] = -np.inf
    positives = x[10:60]

    def blocks():
        return (x[a:a + 100] for a in range(0, 1000, 100))

    expected = isotonic_knots(np.sort(x), positives)
    got = streamed_knots(blocks, 1000, positives, 4)
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])
    x[5] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        streamed_knots(blocks, 1000, positives, 4)
