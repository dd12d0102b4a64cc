"""Issue #19: the comparison scores held-out folds block by block (``held_out``) with the results
of the whole matrix: a TS reference that overflows on one held-out row falls back to the
uncalibrated probabilities for the whole fold, a candidate's error names the row among the fold's
held-out rows, and a short last block is joined to the one before (matrix scaling's predictions of
a few rows round differently from the same rows in a longer product)."""

import itertools

import numpy as np

import calibration as cal
from calibration.comparison import MIN_BLOCK_ROWS, held_out_blocks, stratified_folds
from calibration.inputs import InputBatch
from calibration.metrics.scores import nll
from calibration.metrics.validated import row_blocks


def synthetic(n, k, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.standard_normal((n, k))
    logits[np.arange(n), labels] += 1.5
    return logits * scale, labels


def test_an_overflowing_reference_falls_back_for_the_whole_fold_and_errors_name_the_held_out_row():
    logits, labels = synthetic(2000, 1000, seed=1, scale=0.3)  # under-confident: the reference's T < 1
    test = np.flatnonzero(stratified_folds(labels, 2, 0) == 0)
    assert len(held_out_blocks(len(test), 1000)) > 1
    bad = test[700]  # in the held-out fold's second block
    logits[bad, labels[bad]] = 1e308
    comparison = cal.compare(logits, labels, ["temperature", "histogram_binning"], folds=2, only_folds=[0])
    assert comparison.reference_nll == [nll(cal.softmax(logits[test]), labels[test])]
    assert "row 700 " in comparison.result("temperature").error  # the held-out row, not the block's row 176


def test_a_short_last_held_out_block_joins_the_one_before():
    for n in (1, 63, 64, 65, 5242, 5243, 5243 + 63):
        blocks = held_out_blocks(n, 200)
        assert blocks[0].start == 0 and blocks[-1].stop == n
        assert all(a.stop == b.start for a, b in itertools.pairwise(blocks))
        assert all(b.stop - b.start >= MIN_BLOCK_ROWS for b in blocks) or len(blocks) == 1
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 200, 5622)
    logits = 2 * rng.standard_normal((5622, 200))
    logits[np.arange(5622), labels] += 3.0
    fitted = cal.create("matrix", {"max_iterations": 5}).fit_batch(cal.validate_inputs(logits[:600], "logits"),
                                                                   labels[:600], warn=False)
    test = logits[3000:]  # 2622 rows: row blocks of 2621 and 1
    assert [b.stop - b.start for b in row_blocks(len(test), 200)] == [2621, 1]
    whole = fitted.predict_batch(InputBatch(logits=test))
    by_blocks = np.concatenate([fitted.predict_batch(InputBatch(logits=test[b])) for b in held_out_blocks(*test.shape)])
    np.testing.assert_array_equal(by_blocks, whole)  # a product of the one last row alone rounds differently
