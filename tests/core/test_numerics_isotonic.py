"""Issue #23, item 3: isotonic maps that do not tremble (scores within a relative tolerance
pooled before PAVA) and IRM's argmax guarantee in the dtype it returns."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.isotonic import IsotonicRegression

import calibration as cal
from calibration.methods.isotonic import interpolate_monotone
from calibration.methods.isotonic_knots import MERGE_ATOL, MERGE_RTOL, fit_isotonic_binary
from tests.helpers import load_split, make_reference_input


def floored_set():
    """A model whose tiny probabilities (down to 7e-23) are floored to 1e-12 before the log:
    after the softmax they are distinct values about 1e-24 apart."""
    _, p, labels = load_split("cifar10_wrn16-4", "val")
    return np.log(np.maximum(p.astype(np.float64), 1e-12)), labels


FLOORED_LOGITS, FLOORED_LABELS = floored_set()
IRM = cal.IsotonicMulticlass().fit(FLOORED_LOGITS, FLOORED_LABELS)
IROVA = cal.IsotonicOneVsAll().fit(FLOORED_LOGITS, FLOORED_LABELS)
MAPS = {"irm": (IRM.knots_x_, IRM.knots_y_), **{f"irova-{j}": knots for j, knots in enumerate(IROVA.knots_)}}


def test_the_floored_inputs_really_are_near_equal():
    x = np.unique(cal.softmax(FLOORED_LOGITS).ravel())
    tiny = x[x < 2e-12]
    assert len(tiny) > 100 and np.diff(tiny).min() < 1e-26


def test_near_equal_scores_are_pooled_by_hand():
    # 1e-12 and 1e-12 + 1e-24 are one score: targets (0, 1) pool to 0.5, as do those at 0.5
    x = np.array([1e-12, 1e-12 + 1e-24, 0.5, 0.5])
    xs, ys = fit_isotonic_binary(x, np.array([False, True, True, False]))
    np.testing.assert_array_equal(xs, [1e-12, 0.5])
    np.testing.assert_array_equal(ys, [0.5, 0.5])


def test_pooling_equals_scikit_learn_on_the_snapped_scores():
    """Our map equals scikit-learn's fitted on the scores replaced by their cluster's first value."""
    x = cal.softmax(FLOORED_LOGITS).ravel()
    positive = (np.arange(FLOORED_LOGITS.shape[1])[None, :] == FLOORED_LABELS[:, None]).ravel()
    xs, ys = fit_isotonic_binary(x, positive)
    distinct = np.unique(x)
    starts, i = [], 0
    while i < len(distinct):  # the greedy clustering, written as a plain loop
        starts.append(distinct[i])
        limit = distinct[i] + MERGE_ATOL + MERGE_RTOL * distinct[i]
        while i < len(distinct) and distinct[i] <= limit:
            i += 1
    starts = np.array(starts)
    snapped = starts[np.searchsorted(starts, x, side="right") - 1]
    reference = IsotonicRegression(out_of_bounds="clip").fit(snapped, positive.astype(float))
    np.testing.assert_allclose(interpolate_monotone(starts, xs, ys), reference.predict(starts), atol=1e-12)
    assert np.all(np.diff(xs) > MERGE_ATOL + MERGE_RTOL * xs[:-1])


@pytest.mark.parametrize("name", list(MAPS))
def test_one_ulp_moves_a_map_fitted_on_floored_scores_by_less_than_1e_9(name):
    xs, ys = MAPS[name]
    x = np.unique(cal.softmax(FLOORED_LOGITS).ravel())
    x = np.concatenate([x, xs])
    base = interpolate_monotone(x, xs, ys)
    for direction in (-np.inf, np.inf):
        assert np.abs(interpolate_monotone(np.nextafter(x, direction), xs, ys) - base).max() < 1e-9


@settings(max_examples=300, deadline=None)
@given(x=st.floats(0.0, 1.0), name=st.sampled_from(list(MAPS)))
def test_one_ulp_anywhere_moves_the_map_by_less_than_1e_9(x, name):
    xs, ys = MAPS[name]
    here = interpolate_monotone(np.array([x]), xs, ys)[0]
    for direction in (-np.inf, np.inf):
        assert abs(interpolate_monotone(np.array([np.nextafter(x, direction)]), xs, ys)[0] - here) < 1e-9


FIT_LOGITS, FIT_LABELS = make_reference_input(n=600, k=4, seed=3)
FITTED = cal.IsotonicMulticlass().fit(FIT_LOGITS, FIT_LABELS)

# rows of near-ties: a base value plus offsets of a few ulps to a few 1e-7
offsets = st.sampled_from([0.0, 1e-15, -1e-15, 1e-12, -1e-12, 1e-9, 1e-7, -1e-7, 0.5, -3.0])
rows = st.tuples(st.floats(-30, 30), st.lists(offsets, min_size=4, max_size=4))
batches = st.lists(rows, min_size=1, max_size=8).map(
    lambda rs: np.array([[base + offset for offset in row] for base, row in rs]))


@settings(max_examples=200, deadline=None)
@given(logits=batches)
def test_irm_never_changes_a_plain_argmax_in_float64(logits):
    probs = FITTED.predict_proba(logits)
    assert probs.dtype == np.float64
    np.testing.assert_array_equal(probs.argmax(axis=1), logits.argmax(axis=1))


@settings(max_examples=200, deadline=None)
@given(logits=batches)
def test_irm_never_changes_a_plain_argmax_in_float32(logits):
    torch = pytest.importorskip("torch")
    single = torch.tensor(logits, dtype=torch.float32)
    probs = FITTED.predict_proba(single)
    assert probs.dtype == torch.float32
    np.testing.assert_array_equal(probs.argmax(dim=1).numpy(), single.argmax(dim=1).numpy())
    np.testing.assert_allclose(probs.sum(dim=1).numpy(), 1.0, atol=1e-6)
