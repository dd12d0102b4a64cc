"""``calibration.looks_like_probabilities``: probabilities sent where logits belong, told apart
on real model outputs and by hand-made edge cases."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import calibration as cal
from tests.helpers import DATASETS, load_split


@pytest.mark.parametrize("dataset", DATASETS)
def test_real_model_outputs_are_told_apart(dataset):
    kind, x, _ = load_split(dataset, "test")
    if kind == "probabilities":  # float32 softmax outputs: row sums within 3.1e-7 of 1
        assert cal.looks_like_probabilities(x)
        assert cal.looks_like_probabilities(x.astype(np.float64))
    else:
        assert not cal.looks_like_probabilities(x)
        assert cal.looks_like_probabilities(cal.softmax(x))


def test_the_rule_by_hand():
    p = np.array([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]])
    assert cal.looks_like_probabilities(p)
    assert cal.looks_like_probabilities(p + np.array([[1e-7, 0, 0], [0, 0, -0.0]]))
    assert not cal.looks_like_probabilities(p + np.array([[2e-6, 0, 0], [0, 0, 0]]))  # row 0 sums to 1 + 2e-6
    assert not cal.looks_like_probabilities(np.array([[0.2, 0.3, 0.5], [1.1, -0.1, 0.0]]))  # a negative entry
    assert not cal.looks_like_probabilities(np.array([[0.2, 0.3, 0.5], [0.2, 0.3, np.nan]]))
    assert not cal.looks_like_probabilities(np.array([[0.2, 0.3, 0.5], [0.4, 0.4, 0.4]]))  # only row 0 sums to 1
    assert not cal.looks_like_probabilities(np.array([0.2, 0.8]))  # binary scores are never probabilities
    assert not cal.looks_like_probabilities(np.zeros((0, 3)))
    assert cal.looks_like_probabilities(np.array([[0.2, 0.8]]), tolerance=0.0)
    assert not cal.looks_like_probabilities(np.array([[0.2, 0.8 + 1e-12]]), tolerance=0.0)


@given(arrays(np.float64, st.tuples(st.integers(1, 20), st.integers(2, 12)), elements=st.floats(-30, 30)))
def test_softmax_outputs_always_look_like_probabilities_and_logits_with_a_negative_never(logits):
    assert cal.looks_like_probabilities(cal.softmax(logits))
    if (logits < 0).any():
        assert not cal.looks_like_probabilities(logits)


def test_it_makes_no_copy_of_the_batch():
    """A minimum and the row sums: a few arrays of n floats, never another n x k array."""
    p = np.full((100_000, 10), 0.1)
    tracemalloc.start()
    try:
        assert cal.looks_like_probabilities(p)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= 3 * 100_000 * 8 < p.nbytes // 3
