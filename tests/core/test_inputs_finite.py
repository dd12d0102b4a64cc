"""``check_finite`` tests its array a block of rows at a time (issue #23 item 9: no mask of the
whole array at a fit's peak) and still names the first bad row, wherever the blocks fall."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibration import inputs
from calibration.inputs import check_finite


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 7), block=st.integers(1, 50),
       bad=st.lists(st.tuples(st.integers(0, 39), st.integers(0, 6), st.sampled_from([np.nan, np.inf, -np.inf])),
                    max_size=3))
def test_the_first_bad_row_is_named_whatever_the_block(rows, cols, block, bad):
    array = np.arange(rows * cols, dtype=np.float64).reshape(rows, cols)
    for r, c, value in bad:
        if r < rows and c < cols:
            array[r, c] = value
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(inputs, "FINITE_BLOCK", block)
        for checked in (array, array[:, 0]):  # 2-D, and 1-D scores
            first = [r for r in range(rows) if not np.isfinite(np.atleast_1d(checked[r])).all()]
            if not first:
                check_finite(checked, "x")
                continue
            with pytest.raises(ValueError, match=rf"x contains NaN or infinity \(first in row {first[0]}\)$"):
                check_finite(checked, "x")


@settings(max_examples=80, deadline=None)
@given(rows=st.integers(1, 30), cols=st.integers(2, 9), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2**32 - 1),
       bad=st.lists(st.tuples(st.integers(0, 29), st.integers(0, 8), st.sampled_from([np.nan, np.inf, -np.inf])),
                    max_size=3))
def test_a_batch_validated_by_its_row_range_fails_and_passes_as_the_blocked_check(rows, cols, dtype, seed, bad):
    """A batch small enough to serve is checked through its row maxima and minima (kept for the
    softmax): the same batches pass, the same first bad row is named, and the range is the batch's."""
    array = (5 * np.random.default_rng(seed).standard_normal((rows, cols))).astype(dtype)
    for r, c, value in bad:
        if r < rows and c < cols:
            array[r, c] = value
    first = [r for r in range(rows) if not np.isfinite(array[r]).all()]
    if first:
        with pytest.raises(ValueError, match=rf"logits contains NaN or infinity \(first in row {first[0]}\)$"):
            inputs.validate_inputs(array, "logits")
        return
    batch = inputs.validate_inputs(array, "logits")
    assert batch.row_range is not None
    assert np.array_equal(batch.row_range[0], array.max(axis=1, keepdims=True))
    assert np.array_equal(batch.row_range[1], array.min(axis=1, keepdims=True))
    assert batch.looks_like_probabilities() is inputs.looks_like_probabilities(array)


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 12), cols=st.integers(2, 9), seed=st.integers(0, 2**32 - 1),
       negative=st.booleans(), over=st.booleans())
def test_probability_like_batches_are_told_the_same_with_the_row_range(rows, cols, seed, negative, over):
    """Softmax rows (and the same with one entry made negative or over 1) are told apart from logits
    the same way through the row range as by ``looks_like_probabilities`` itself."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(cols), size=rows)
    if negative:
        p[rng.integers(rows), rng.integers(cols)] = -1e-3
    if over:
        p[rng.integers(rows), rng.integers(cols)] = 1.5
    batch = inputs.validate_inputs(p, "logits")
    assert batch.looks_like_probabilities() is inputs.looks_like_probabilities(p)
    assert batch.looks_like_probabilities() is (not negative and not over)


def test_a_batch_larger_than_one_block_is_checked_in_blocks_and_keeps_no_range():
    array = np.zeros((inputs.FINITE_BLOCK // 100 + 1, 100), dtype=np.float32)
    assert inputs.validate_inputs(array, "logits").row_range is None
    array[-1, 3] = np.nan
    with pytest.raises(ValueError, match=rf"first in row {len(array) - 1}\)"):
        inputs.validate_inputs(array, "logits")
