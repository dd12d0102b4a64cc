"""A cross-validation fold's rows as views of the array, laid out in place.

At 50000 x 1000, a fold's training and held-out rows copied out of the float64 array were ~1.6x
and ~0.4x the float32 input's bytes, for each fold of each comparison. ``FoldLayout`` instead
permutes the rows of an array the core may reorder (``inputs.may_reorder``) so that a fold's
training rows come first and its held-out rows after, each in their original order, and puts
every row back with ``restore``. ``permute_rows`` applies a permutation in place by following
each of its cycles once, with one row of scratch.
"""

from __future__ import annotations

import numpy as np


def permute_rows(array: np.ndarray, take: np.ndarray) -> None:
    """``array[:] = array[take]`` in place for a permutation ``take``, one row of scratch: each
    cycle of the permutation is followed once (every row is copied once, exactly)."""
    take = take.tolist()
    seen = bytearray(len(take))
    for start, first in enumerate(take):
        if seen[start] or first == start:
            continue
        saved = array[start].copy()
        at = start
        while True:
            seen[at] = 1
            source = take[at]
            if source == start:
                array[at] = saved
                break
            array[at] = array[source]
            at = source


class FoldLayout:
    """The rows of ``array`` laid out in place for one fold at a time: its training rows in their
    order, then its held-out rows in theirs, so both are views (no copies: each was ~1.6x and
    ~0.4x the float32 array's bytes as float64 at 50000 x 1000). ``restore`` puts every row back.
    Only for an array the core may reorder (``inputs.may_reorder``); values and row order within
    each part are those of ``array[train]`` and ``array[test]``, so fits on them are the same."""

    def __init__(self, array: np.ndarray):
        self.array = array
        self.order = np.arange(len(array))  # original row of each position

    def fold(self, train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        wanted = np.concatenate([np.flatnonzero(train), np.flatnonzero(~train)])
        self._arrange(wanted)
        n_train = int(train.sum())
        return self.array[:n_train], self.array[n_train:]

    def restore(self) -> None:
        self._arrange(np.arange(len(self.array)))

    def _arrange(self, wanted: np.ndarray) -> None:
        position = np.empty_like(self.order)
        position[self.order] = np.arange(len(self.order))
        permute_rows(self.array, position[wanted])
        self.order = wanted
