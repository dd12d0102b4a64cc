"""Issue #19: a comparison on an array the core may reorder (``allow_reordering``) lays it out in
place fold by fold, training rows then held-out rows, and takes both as views: the same results,
bit for bit, as the copies ``array[train]``, ``array[test]``, every row back in place afterwards,
and a lower peak. Vector scaling's standardisation by row blocks equals the whole-matrix one."""

import numpy as np
import pytest

import calibration as cal
from calibration.fold_layout import FoldLayout, permute_rows
from calibration.inputs import may_reorder
from calibration.methods.affine_numerics import standardisation
from calibration.metrics.validated import row_blocks
from tests.core.memory import synthetic, traced_peak

NAMES = ["temperature", "ensemble_temperature", "expectation_consistency", "isotonic_multiclass", "vector"]


def results(comparison):
    return ([(r.candidate.name, {m: v for m, v in r.per_fold.items() if m != "fit_seconds"}, r.tail_risk,
              r.converged, r.error) for r in comparison.results],
            comparison.uncalibrated, comparison.reference_nll)


def test_permute_rows_is_a_gather_in_place():
    rng = np.random.default_rng(0)
    array = rng.standard_normal((500, 7))
    for take in (rng.permutation(500), np.arange(500), np.roll(np.arange(500), 3)):
        expected = array[take]
        permute_rows(array, take)
        np.testing.assert_array_equal(array, expected)


def test_fold_layout_gives_each_folds_rows_in_order_and_restores():
    rng = np.random.default_rng(1)
    original = rng.standard_normal((301, 5))
    array = original.copy()
    layout = FoldLayout(array)
    assignment = rng.integers(0, 4, 301)
    for fold in (2, 0, 3, 1):
        train, test = layout.fold(assignment != fold)
        np.testing.assert_array_equal(train, original[assignment != fold])
        np.testing.assert_array_equal(test, original[assignment == fold])
        assert train.base is array and test.base is array
    layout.restore()
    np.testing.assert_array_equal(array, original)


@pytest.mark.parametrize("kind", ["logits", "probabilities"])
def test_compare_on_views_equals_compare_on_copies(kind):
    logits, labels = synthetic(600, 12, seed=4)
    x = cal.softmax(logits) if kind == "probabilities" else logits
    copies = cal.compare(x.copy(), labels, NAMES, input=kind)
    lent = cal.allow_reordering(x.copy())
    assert may_reorder(lent) and not may_reorder(x)
    views = cal.compare(lent, labels, NAMES, input=kind)
    assert results(views) == results(copies)
    np.testing.assert_array_equal(lent, x)


def test_validate_inputs_lets_the_core_reorder_only_its_own_copies():
    logits = np.ones((4, 3), dtype=np.float32)
    assert may_reorder(cal.validate_inputs(logits, "logits").logits)
    float64 = np.ones((4, 3))
    assert not may_reorder(cal.validate_inputs(float64, "logits").logits)


def test_compare_on_views_holds_no_fold_copies():
    logits, labels = synthetic(2000, 200, seed=5)
    names = ["temperature", "expectation_consistency"]
    copies = traced_peak(lambda: cal.compare(logits, labels, names))
    lent = cal.allow_reordering(logits.copy())
    views = traced_peak(lambda: cal.compare(lent, labels, names))
    assert views < copies - 0.8 * logits.nbytes  # the fold's training and held-out rows: 1x
    assert views < 0.8 * logits.nbytes


def test_blocked_standardisation_equals_the_whole():
    logits, _ = synthetic(3000, 300, seed=6)  # several row blocks
    blocks = row_blocks(*logits.shape)
    assert len(blocks) > 1
    whole, blocked = standardisation(logits), standardisation(logits, blocks)
    np.testing.assert_array_equal(whole[0], blocked[0])
    np.testing.assert_array_equal(whole[1], blocked[1])
