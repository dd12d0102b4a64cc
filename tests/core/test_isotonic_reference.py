"""Issue #35 item 7: the isotonic maps are the exact PAVA solution, scikit-learn's
``IsotonicRegression(out_of_bounds="clip")`` (scores pooled as its ``_make_unique`` pools them:
greedily, within an absolute ``np.finfo(float64).resolution`` of a group's first score), on every
shared set and on scores full of exact and near ties; and a torch caller gets the map numpy's
caller gets, logits included (the scores reach the map as the same float64 values)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.isotonic import IsotonicRegression

import calibration as cal
from calibration.methods.isotonic import STRICT_SLOPE
from calibration.methods.isotonic_knots import fit_isotonic_binary, isotonic_knots
from calibration.methods.isotonic_streamed import streamed_knots
from tests.helpers import DATA, load_split, require

SETS = sorted(path.name.removesuffix("_val.npz") for path in DATA.glob("*_val.npz"))


def sklearn_map(x: np.ndarray, positive: np.ndarray) -> IsotonicRegression:
    return IsotonicRegression(out_of_bounds="clip").fit(x, positive.astype(np.float64))


def normalised(mapped: np.ndarray) -> np.ndarray:
    """Rows divided by their sums; a row summing to 0 becomes uniform (as IROvA's)."""
    sums = mapped.sum(axis=1, keepdims=True)
    mapped = np.where(sums > 0, mapped, 1.0)
    return mapped / mapped.sum(axis=1, keepdims=True)


@pytest.fixture(scope="module", params=SETS)
def fitted(request):
    """One shared set: our IRM and IROvA and scikit-learn's maps fitted on its validation split,
    and the test split's probabilities."""
    kind, x, labels = load_split(request.param, "val")
    test_kind, x_test, _ = load_split(request.param, "test")
    p = cal.validate_inputs(x, kind).probabilities
    onehot = np.arange(p.shape[1])[None, :] == labels[:, None]
    return SimpleNamespace(
        name=request.param, x_test=x_test, p_test=cal.validate_inputs(x_test, test_kind).probabilities,
        irm=cal.IsotonicMulticlass(input=kind).fit(x, labels), irm_ref=sklearn_map(p.ravel(), onehot.ravel()),
        irova=cal.IsotonicOneVsAll(input=kind).fit(x, labels),
        irova_ref=[sklearn_map(p[:, j], onehot[:, j]) for j in range(p.shape[1])])


def assert_same_knots(xs, ys, reference: IsotonicRegression, where: str) -> None:
    expected = len(reference.X_thresholds_)
    assert len(xs) == expected, f"{where}: {len(xs)} knots, scikit-learn's {expected}"
    np.testing.assert_allclose(xs, reference.X_thresholds_, rtol=0, atol=1e-12, err_msg=where)
    np.testing.assert_allclose(ys, reference.y_thresholds_, rtol=0, atol=1e-12, err_msg=where)


def test_irm_knots_are_scikit_learns(fitted):
    assert_same_knots(fitted.irm.knots_x_, fitted.irm.knots_y_, fitted.irm_ref, f"{fitted.name} IRM")


def test_irova_knots_are_scikit_learns(fitted):
    for j, ((xs, ys), reference) in enumerate(zip(fitted.irova.knots_, fitted.irova_ref, strict=True)):
        assert_same_knots(xs, ys, reference, f"{fitted.name} IROvA class {j}")


def test_irm_test_probabilities_are_those_of_scikit_learns_map(fitted):
    """IRM as Mix-n-Match's code computes it with scikit-learn, ``g(p) + 1e-9·p``, normalised."""
    p = fitted.p_test
    expected = normalised(fitted.irm_ref.predict(p.ravel()).reshape(p.shape) + STRICT_SLOPE * p)
    np.testing.assert_allclose(fitted.irm.predict_proba(fitted.x_test), expected, rtol=0, atol=1e-12)


def test_irova_test_probabilities_are_those_of_scikit_learns_maps(fitted):
    p = fitted.p_test
    expected = normalised(np.stack([reference.predict(p[:, j]) for j, reference in enumerate(fitted.irova_ref)],
                                   axis=1))
    np.testing.assert_allclose(fitted.irova.predict_proba(fitted.x_test), expected, rtol=0, atol=1e-12)


def test_two_scores_one_resolution_apart_are_two_knots_and_closer_ones_one():
    """By hand: scikit-learn starts a new group at ``x - first >= 1e-15``. 0.5 and 0.5 + 2^-49
    (1.78e-15 apart) stay apart, targets 0 and 1 each; 0.5 + 2^-53 (1.1e-16 from 0.5) joins 0.5:
    the group {0.5, 0.5 + 2^-53} has targets (0, 1) and value 0.5."""
    x = np.array([0.5, 0.5 + 2.0**-49, 0.5 + 2.0**-53, 0.75])
    positive = np.array([False, True, True, True])
    xs, ys = fit_isotonic_binary(x, positive)
    np.testing.assert_array_equal(xs, [0.5, 0.5 + 2.0**-49, 0.75])
    np.testing.assert_array_equal(ys, [0.5, 1.0, 1.0])
    assert_same_knots(xs, ys, sklearn_map(x, positive), "by hand")


# scores that tie exactly (the same base drawn twice) and nearly: a base moved by a multiple of
# steps around scikit-learn's resolution (1e-15), of a few ulps near 1, and of 1e-24 near 1e-12
BASES = [0.0, 1e-24, 1e-12, 3e-7, 0.1, 0.25, 0.5, 0.75, 1.0 - 2.0**-20, 1.0 - 2.0**-40]
STEPS = [0.0, 1e-24, 2.0**-53, 2.0**-52, 2.5e-16, 5e-16, 1e-15, 1e-15 - 2.0**-60, 1e-15 + 2.0**-60, 7e-16, 1e-9]
scores = st.tuples(st.sampled_from(BASES), st.sampled_from(STEPS), st.integers(0, 12), st.booleans())
samples = st.lists(scores, min_size=1, max_size=300)


@settings(max_examples=300, deadline=None)
@given(samples=samples, ranges=st.integers(1, 5), size=st.integers(1, 50))
def test_tie_heavy_scores_give_scikit_learns_knots_in_memory_and_streamed(samples, ranges, size):
    x = np.array([min(1.0, base + m * step) for base, step, m, _ in samples])
    positive = np.array([label for *_, label in samples])
    xs, ys = fit_isotonic_binary(x, positive)
    assert_same_knots(xs, ys, sklearn_map(x, positive), "tie-heavy scores")
    n = len(x)
    streamed = streamed_knots(lambda: (x[a:a + size] for a in range(0, n, size)), n, x[positive], ranges,
                              chunk=max(1, size // 3))
    expected = isotonic_knots(np.sort(x), x[positive])
    np.testing.assert_array_equal(streamed[0], expected[0])
    np.testing.assert_array_equal(streamed[1], expected[1])


@pytest.fixture(scope="module")
def logits_set():
    _, x, labels = load_split("cifar10_resnet50_cross_entropy", "val")
    _, x_test, _ = load_split("cifar10_resnet50_cross_entropy", "test")
    return x.astype(np.float64), labels, x_test[:2000].astype(np.float64)


@pytest.mark.parametrize("method", ["isotonic_multiclass", "isotonic_one_vs_all"])
def test_torch_logits_reach_the_map_as_numpys_scores(logits_set, method):
    """The map is as steep as scikit-learn's (knots 1e-15 apart); the softmax a torch caller's
    logits go through is numpy's, so its probabilities are numpy's to rounding, not to a slope
    times an ulp of another library's ``exp``."""
    torch = require("torch")
    x, labels, x_test = logits_set
    calibrator = cal.create(method).fit(x, labels)
    expected = calibrator.predict_proba(x_test)
    on_torch = calibrator.predict_proba(torch.asarray(x_test, dtype=torch.float64))
    np.testing.assert_allclose(on_torch.numpy(), expected, rtol=0, atol=1e-15)
    fitted_on_torch = cal.create(method).fit(torch.asarray(x), torch.asarray(labels))
    assert fitted_on_torch.to_dict()["params"] == calibrator.to_dict()["params"]
