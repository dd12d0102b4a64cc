"""Issue #23, item 3, as issue #35 item 7 leaves it: isotonic maps pool scores as scikit-learn
does (within an absolute 1e-15: floored probabilities 1e-24 apart are one cluster, and the knots
are scikit-learn's), which bounds a map's slope by ``max Δy / 1e-15``; and IRM's argmax guarantee
in the dtype it returns."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.isotonic import IsotonicRegression

import calibration as cal
from calibration.methods.isotonic import interpolate_monotone
from calibration.methods.isotonic_knots import TIE_ATOL, fit_isotonic_binary
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


@pytest.mark.parametrize("name", list(MAPS))
def test_floored_scores_give_scikit_learns_knots(name):
    p = cal.softmax(FLOORED_LOGITS)
    positive = np.arange(p.shape[1])[None, :] == FLOORED_LABELS[:, None]
    x, target = (p.ravel(), positive.ravel()) if name == "irm" else (p[:, int(name[6:])], positive[:, int(name[6:])])
    reference = IsotonicRegression(out_of_bounds="clip").fit(x, target.astype(float))
    xs, ys = MAPS[name]
    np.testing.assert_array_equal(xs, reference.X_thresholds_)
    np.testing.assert_allclose(ys, reference.y_thresholds_, rtol=0, atol=1e-12)
    assert np.all(xs[1:] - xs[:-1] >= TIE_ATOL)


def steepest_change(xs, ys, x: np.ndarray) -> np.ndarray:
    """The most a map can move between ``x`` and a neighbouring float: its knots are at least
    ``TIE_ATOL`` apart (scikit-learn's clusters), so its slope is at most ``max Δy / TIE_ATOL``."""
    return (np.spacing(np.abs(x)) / TIE_ATOL) * np.diff(ys).max() + 1e-16


@pytest.mark.parametrize("name", list(MAPS))
def test_one_ulp_moves_a_map_fitted_on_floored_scores_by_at_most_its_steepest_slope(name):
    """Among the floored scores (1e-24 apart below 2e-12) an ulp moves the map by under 1e-12;
    anywhere, by at most an ulp times the steepest slope that 1e-15 clusters allow."""
    xs, ys = MAPS[name]
    x = np.concatenate([np.unique(cal.softmax(FLOORED_LOGITS).ravel()), xs])
    base = interpolate_monotone(x, xs, ys)
    for direction in (-np.inf, np.inf):
        moved = np.abs(interpolate_monotone(np.nextafter(x, direction), xs, ys) - base)
        assert np.all(moved <= steepest_change(xs, ys, x))
        assert moved[x < 2e-12].max() < 1e-12


@settings(max_examples=300, deadline=None)
@given(x=st.floats(0.0, 1.0), name=st.sampled_from(list(MAPS)))
def test_one_ulp_anywhere_moves_the_map_by_at_most_its_steepest_slope(x, name):
    xs, ys = MAPS[name]
    here = interpolate_monotone(np.array([x]), xs, ys)[0]
    for direction in (-np.inf, np.inf):
        moved = abs(interpolate_monotone(np.array([np.nextafter(x, direction)]), xs, ys)[0] - here)
        assert moved <= steepest_change(xs, ys, np.array([x]))[0]


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
