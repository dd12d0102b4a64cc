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
