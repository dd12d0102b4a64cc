"""Validation and conversion of what callers pass in: the one place that says what is accepted.

Inputs are explicit, never guessed from their values:

* ``"logits"``: real scores of shape ``(n, k)``, ``k >= 2``; probabilities are ``softmax(z)``.
* ``"probabilities"``: shape ``(n, k)``, entries ``>= 0``, rows summing to 1 within
  ``ROW_SUM_TOLERANCE``. Where a method needs logits they are ``log(max(p, PROBABILITY_FLOOR))``.
* ``"scores"``: binary scores of shape ``(n,)``, read as the log-odds of class 1, i.e. the
  logits ``[0, s]`` (k = 2).

Everything is converted to float64. Errors are ``ValueError`` naming the array and, for bad
values, the first bad row.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from .softmax import softmax

INPUT_KINDS = ("logits", "probabilities", "scores")
PROBABILITY_FLOOR = 1e-12
ROW_SUM_TOLERANCE = 1e-3


def as_float_array(x, name: str) -> np.ndarray:
    """``x`` as a float64 array, refusing ragged, boolean, non-numeric, complex and object input."""
    try:
        array = np.asarray(x)
    except ValueError as exc:  # numpy refuses ragged nested lists
        raise ValueError(f"{name} is ragged: its rows have different lengths") from exc
    if array.dtype == object or array.dtype.kind not in "fiu":
        raise ValueError(f"{name} must hold real numbers, got dtype {array.dtype}")
    return array.astype(np.float64, copy=False)


def first_bad_row(mask: np.ndarray) -> int:
    """Index of the first row of a boolean array with any True entry."""
    rows = mask.reshape(mask.shape[0], -1).any(axis=1)
    return int(np.argmax(rows))


def check_finite(array: np.ndarray, name: str) -> None:
    finite = np.isfinite(array)
    if not finite.all():
        raise ValueError(f"{name} contains NaN or infinity (first in row {first_bad_row(~finite)})")


def check_probabilities(p: np.ndarray, name: str = "probabilities", nonnegative: bool = True) -> None:
    """Entries >= 0 and rows summing to 1 within ``ROW_SUM_TOLERANCE`` (so no entry exceeds
    ``1 + ROW_SUM_TOLERANCE``).

    Two cheap passes (row sums as a matrix-vector product, and the global minimum); NaN and
    infinity fail the row-sum test and are then reported precisely. ``nonnegative=False`` skips
    the second pass, for a caller that checks the sign itself on the entries it reads.
    """
    off = ~(np.abs(p @ np.ones(p.shape[1]) - 1.0) <= ROW_SUM_TOLERANCE)
    if off.any():
        check_finite(p, name)
        row = int(np.argmax(off))
        raise ValueError(
            f"{name} rows must sum to 1 within {ROW_SUM_TOLERANCE:g}; row {row} sums to "
            f"{p[row].sum():.6g} (logits must be sent as logits, not as probabilities)"
        )
    if nonnegative and not p.min() >= 0:
        raise ValueError(f"{name} must lie in [0, 1] (first negative entry in row {first_bad_row(p < 0)})")


class Scores:
    """A validated batch, viewable as logits or as probabilities (each computed once).

    Built from logits: probabilities are their max-shifted softmax. Built from probabilities:
    those are used as given, and logits are ``log(max(p, PROBABILITY_FLOOR))``.
    """

    def __init__(self, *, logits: np.ndarray | None = None, probabilities: np.ndarray | None = None):
        if (logits is None) == (probabilities is None):
            raise TypeError("give exactly one of logits or probabilities")
        self.source = "logits" if logits is not None else "probabilities"
        array = logits if logits is not None else probabilities
        self.n, self.k = array.shape
        self.__dict__[self.source] = array

    @cached_property
    def logits(self) -> np.ndarray:
        return np.log(np.maximum(self.probabilities, PROBABILITY_FLOOR))

    @cached_property
    def probabilities(self) -> np.ndarray:
        return softmax(self.logits)


def to_scores(x, kind: str, name: str | None = None) -> Scores:
    """Validate ``x`` as an input of the given kind and wrap it."""
    if kind not in INPUT_KINDS:
        raise ValueError(f"input kind must be one of {', '.join(INPUT_KINDS)}, got {kind!r}")
    name = name or kind
    array = as_float_array(x, name)
    if kind == "scores":
        if array.ndim != 1:
            raise ValueError(f"{name} must be a 1-D array of binary scores, got shape {array.shape}")
        _check_rows(array, name)
        check_finite(array, name)
        logits = np.zeros((array.shape[0], 2))
        logits[:, 1] = array
        return Scores(logits=logits)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n samples, k classes), got shape {array.shape}")
    _check_rows(array, name)
    if array.shape[1] < 2:
        raise ValueError(f"{name} must have at least 2 classes (columns), got {array.shape[1]}")
    if kind == "logits":
        check_finite(array, name)
        return Scores(logits=array)
    check_probabilities(array, name)
    return Scores(probabilities=array)


def _check_rows(array: np.ndarray, name: str) -> None:
    if array.shape[0] == 0:
        raise ValueError(f"{name} is empty: it has no rows")


def check_labels(labels, n: int, k: int) -> np.ndarray:
    """Labels as int64 class indices in ``[0, k)``, one per row."""
    array = np.asarray(labels)
    if array.ndim != 1:
        raise ValueError(f"labels must be a 1-D array of class indices, got shape {array.shape}")
    if array.shape[0] != n:
        raise ValueError(f"labels has {array.shape[0]} entries but the inputs have {n} rows")
    if array.dtype.kind == "b":
        array = array.astype(np.int64)
    if array.dtype.kind not in "iu":
        raise ValueError(f"labels must be integers (class indices), got dtype {array.dtype}")
    outside = (array < 0) | (array >= k)  # compared in the given dtype: uint64 stays exact
    if outside.any():
        row = int(np.argmax(outside))
        raise ValueError(f"labels must be in [0, {k}); found {array[row]} in row {row}")
    return array.astype(np.int64, copy=False)
