"""Validation and conversion of what callers pass in: the one place that says what is accepted.

Inputs are explicit, never guessed from their values:

* ``"logits"``: real scores of shape ``(n, k)``, ``k >= 2``; probabilities are ``softmax(z)``.
* ``"probabilities"``: shape ``(n, k)``, entries ``>= 0``, rows summing to 1 within
  ``ROW_SUM_TOLERANCE``. Where a method needs logits they are ``log(max(p, PROBABILITY_FLOOR))``.
* ``"scores"``: binary scores of shape ``(n,)``, read as the log-odds of class 1, i.e. the
  logits ``[0, s]`` (k = 2).

Everything is converted to float64. Errors are ``ValueError`` naming the array and, for bad
values, the first bad row. ``looks_like_probabilities`` tells a caller (the service) when a batch
sent as logits is probably probabilities, so it can ask for the right kind instead of guessing.
"""

from __future__ import annotations

import math
import weakref
from functools import cached_property
from typing import Literal, get_args

import numpy as np

from .backend import floating, is_numpy, namespace, to_host
from .softmax import softmax

InputKind = Literal["logits", "probabilities", "scores"]
INPUT_KINDS: tuple[InputKind, ...] = get_args(InputKind)  # ("logits", "probabilities", "scores")
PROBABILITY_FLOOR = 1e-12
ROW_SUM_TOLERANCE = 1e-3
LOOKALIKE_TOLERANCE = 1e-6
FINITE_BLOCK = 1 << 17  # entries check_finite tests at once


def as_float_array(x, name: str, keep_float32: bool = False) -> np.ndarray:
    """``x`` as a float64 array (float32 kept as it is with ``keep_float32``: see
    ``InputBatch``), refusing ragged, boolean, non-numeric, complex and object input."""
    try:
        array = np.asarray(x)
    except ValueError as exc:  # numpy refuses ragged nested lists
        raise ValueError(f"{name} is ragged: its rows have different lengths") from exc
    if array.dtype == object or array.dtype.kind not in "fiu":
        raise ValueError(f"{name} must hold real numbers, got dtype {array.dtype}")
    if keep_float32 and array.dtype == np.float32:
        return array
    return array.astype(np.float64, copy=False)


_REORDERABLE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def allow_reordering(array: np.ndarray) -> np.ndarray:
    """Let the core reorder ``array``'s rows in place while it works on it, always putting every
    row back before it returns (``fold_layout.FoldLayout``: a fold's rows as views, not copies).
    For an array no one else reads meanwhile: one the caller made for the fit (the service's
    observations loaded from the log). ``validate_inputs`` marks the float64 copies it makes."""
    _REORDERABLE[id(array)] = array
    return array


def may_reorder(array) -> bool:
    """Whether ``allow_reordering`` marked ``array`` (a writeable, C-ordered 2-D numpy array)."""
    return (_REORDERABLE.get(id(array)) is array and isinstance(array, np.ndarray) and array.ndim == 2
            and array.flags.c_contiguous and array.flags.writeable)


def first_bad_row(mask: np.ndarray) -> int:
    """Index of the first row of a boolean array with any True entry."""
    rows = mask.reshape(mask.shape[0], -1).any(axis=1)
    return int(np.argmax(rows))


def check_finite(array: np.ndarray, name: str) -> None:
    """No NaN or infinity in ``array`` (1-D or 2-D), checked ``FINITE_BLOCK`` entries of rows at a
    time: a mask of the whole array would be a quarter of a float32 fit body's bytes at the fit's
    peak, and the blocks are no slower than one whole-array check."""
    rows = max(1, FINITE_BLOCK // max(1, math.prod(array.shape[1:])))
    for start in range(0, len(array), rows):
        finite = np.isfinite(array[start:start + rows])
        if not finite.all():
            raise ValueError(f"{name} contains NaN or infinity (first in row {start + first_bad_row(~finite)})")


def finite_row_range(array: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """The row maxima and minima of a 2-D float ``array`` (shape (n, 1) each), after checking that
    it holds no NaN or infinity: the extremes propagate NaN, and an infinity is a row's maximum or
    minimum, so every entry is finite exactly when they all are (else ``check_finite`` says where).
    Two reductions a caller reuses (``softmax.scaled_softmax_as`` needs both) in place of a mask."""
    top, bottom = array.max(axis=1, keepdims=True), array.min(axis=1, keepdims=True)
    if not (np.isfinite(top).all() and np.isfinite(bottom).all()):
        check_finite(array, name)  # raises, naming the first bad row
    return top, bottom


def check_probabilities(p: np.ndarray, name: str = "probabilities", nonnegative: bool = True) -> None:
    """Entries >= 0 and rows summing to 1 within ``ROW_SUM_TOLERANCE`` (so no entry exceeds
    ``1 + ROW_SUM_TOLERANCE``).

    Two cheap passes (row sums as a matrix-vector product in ``p``'s dtype: float32 row sums
    err by about 1e-7·√k, far inside the tolerance, and need no float64 copy; and the global
    minimum); NaN and
    infinity fail the row-sum test and are then reported precisely. ``nonnegative=False`` skips
    the second pass, for a caller that checks the sign itself on the entries it reads.
    """
    off = ~(np.abs(p @ np.ones(p.shape[1], dtype=p.dtype) - 1.0) <= ROW_SUM_TOLERANCE)  # float32 stays float32
    if off.any():
        check_finite(p, name)
        row = int(np.argmax(off))
        raise ValueError(
            f"{name} rows must sum to 1 within {ROW_SUM_TOLERANCE:g}; row {row} sums to "
            f"{p[row].sum():.6g} (logits must be sent as logits, not as probabilities)"
        )
    if nonnegative and not p.min() >= 0:
        raise ValueError(f"{name} must lie in [0, 1] (first negative entry in row {first_bad_row(p < 0)})")


def looks_like_probabilities(x, tolerance: float = LOOKALIKE_TOLERANCE) -> bool:
    """Whether a batch meant as logits, shape ``(n, k)`` with ``n >= 1``, looks like
    probabilities: every entry ``>= 0`` and every row summing to 1 within ``tolerance``
    (``|sum_j x_ij - 1| <= tolerance`` for all ``i``). Softmax outputs pass; logits almost never
    do (any negative entry, or one row summing elsewhere, is enough to fail).

    Vectorised, in ``x``'s array namespace (numpy or e.g. torch on its device), with no copy of
    ``x``: a minimum and the row sums. Row 0 is tested alone first, so real logits, which almost
    always fail there, cost O(k). NaN fails both tests. Anything not 2-D, or empty, is ``False``.
    """
    xp = namespace(x)
    if len(x.shape) != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        return False

    def all_rows(a) -> bool:
        if xp is np and a.dtype == np.float32:  # summed in float64: float32 row sums err by ~1e-7·√k
            a = a.astype(np.float64)
        return bool(xp.min(a) >= 0) and bool(xp.all(xp.abs(xp.sum(a, axis=1) - 1.0) <= tolerance))

    return all_rows(x[:1]) and all_rows(x)


class InputBatch:
    """A validated batch of classifier outputs (``validate_inputs`` makes one), viewable as logits
    or as probabilities (each computed once), in the array namespace ``xp`` it came in (numpy, or
    e.g. torch on a GPU; see ``backend``). Binary ``scores`` arrive as the logits ``[0, s]``.

    Built from logits: probabilities are their max-shifted softmax. Built from probabilities:
    those are used as given, and logits are ``log(max(p, PROBABILITY_FLOOR))``.

    A float32 numpy array is kept as it came (``given``); ``logits``/``probabilities`` read it as
    a float64 copy made the first time they are read. Readers that accumulate in float64 a block
    of rows at a time (temperature scaling's sums, ``shifted_logits``) read ``given`` instead and
    hold no float64 copy of the whole batch; widening float32 to float64 is exact, so they compute
    the same numbers. What validation read from the array (finiteness, ``row_range``) stands only
    while the array, not copied, is not written to: validate it again after writing into it.
    """

    def __init__(self, *, logits=None, probabilities=None, row_range=None):
        if (logits is None) == (probabilities is None):
            raise TypeError("give exactly one of logits or probabilities")
        self.source = "logits" if logits is not None else "probabilities"
        array = logits if logits is not None else probabilities
        self.xp = namespace(array)
        self.n, self.k = array.shape
        self.given = array
        # (row maxima, row minima) of ``given``, shape (n, 1) each, where validation read them
        self.row_range = row_range
        if not (self.xp is np and array.dtype == np.float32):
            self.__dict__[self.source] = array

    def looks_like_probabilities(self, tolerance: float = LOOKALIKE_TOLERANCE) -> bool:
        """``looks_like_probabilities(given)``, answered from the row range where validation read it
        (a negative row minimum, or a row maximum over ``1 + tolerance``, is enough to fail)."""
        if self.row_range is not None and (self.row_range[1].min() < 0 or self.row_range[0].max() > 1 + tolerance):
            return False
        return looks_like_probabilities(self.given, tolerance)

    @cached_property
    def logits(self):
        if self.source == "logits":  # float32 on the host: widened once, a copy the core may reorder
            return allow_reordering(self.given.astype(np.float64))
        return self.xp.log(self.xp.clip(self.probabilities, min=PROBABILITY_FLOOR))

    @cached_property
    def probabilities(self):
        if self.source == "probabilities":
            return allow_reordering(self.given.astype(np.float64))
        return softmax(self.logits)

    def logit_rows(self, rows: slice) -> np.ndarray:
        """``logits[rows]`` of a numpy batch, computed for those rows alone while the whole
        float64 view has not been made: float32 logits widened (exact), probabilities as
        ``log(max(p, PROBABILITY_FLOOR))`` of their widened rows; the same numbers either way."""
        if "logits" in self.__dict__ or self.xp is not np:
            return self.logits[rows]
        if self.source == "logits":
            return self.given[rows].astype(np.float64)
        return np.log(np.clip(self.probability_rows(rows), min=PROBABILITY_FLOOR))

    def probability_rows(self, rows: slice) -> np.ndarray:
        """``probabilities[rows]`` of a numpy batch, as ``logit_rows`` (softmax is row-wise, so the
        rows' softmax is the softmax's rows)."""
        if "probabilities" in self.__dict__ or self.xp is not np:
            return self.probabilities[rows]
        if self.source == "probabilities":
            return self.given[rows].astype(np.float64)
        return softmax(self.logit_rows(rows))

    def on_host(self) -> InputBatch:
        """The same batch as float64 numpy arrays (for the parts that run on the host)."""
        if self.xp is np:
            return self
        return InputBatch(**{self.source: to_host(getattr(self.in_float64(), self.source))})

    def in_float64(self) -> InputBatch:
        if self.xp is np or getattr(self, self.source).dtype == self.xp.float64:
            return self
        return InputBatch(**{self.source: self.xp.astype(getattr(self, self.source), self.xp.float64)})


def validate_inputs(x, kind: str, name: str | None = None) -> InputBatch:
    """Validate ``x`` as an input of the given kind and wrap it (numpy input as float64, float32
    kept as ``InputBatch.given``; other Array API arrays stay in their namespace, on their device,
    in their floating dtype)."""
    if kind not in INPUT_KINDS:
        raise ValueError(f"input kind must be one of {', '.join(INPUT_KINDS)}, got {kind!r}")
    name = name or kind
    if not is_numpy(x):
        return _device_batch(x, kind, name)
    array = as_float_array(x, name, keep_float32=True)
    _check_shape(array.shape, kind, name)
    if not (isinstance(x, np.ndarray) and np.may_share_memory(array, x)):
        allow_reordering(array)  # a copy made here: no one else holds it
    if kind == "scores":
        check_finite(array, name)
        logits = np.zeros((array.shape[0], 2))
        logits[:, 1] = array
        return InputBatch(logits=logits)
    if kind == "logits":
        if array.size <= FINITE_BLOCK:  # a batch to serve: its row range is the softmax's too
            return InputBatch(logits=array, row_range=finite_row_range(array, name))
        check_finite(array, name)
        return InputBatch(logits=array)
    check_probabilities(array, name)
    return InputBatch(probabilities=array)


def _check_shape(shape: tuple[int, ...], kind: str, name: str) -> None:
    if kind == "scores":
        if len(shape) != 1:
            raise ValueError(f"{name} must be a 1-D array of binary scores, got shape {shape}")
    elif len(shape) != 2:
        raise ValueError(f"{name} must be a 2-D array (n samples, k classes), got shape {shape}")
    if shape[0] == 0:
        raise ValueError(f"{name} is empty: it has no rows")
    if kind != "scores" and len(shape) == 2 and shape[1] < 2:  # len 2 holds here; restated for mypy
        raise ValueError(f"{name} must have at least 2 classes (columns), got {shape[1]}")


def _device_batch(x, kind: str, name: str) -> InputBatch:
    """``validate_inputs`` on the array's device; a failed check is redone on a host copy, which
    raises the same precise error as numpy input would."""
    xp = namespace(x)
    if not (xp.isdtype(x.dtype, "real floating") or xp.isdtype(x.dtype, "integral")):
        raise ValueError(f"{name} must hold real numbers, got dtype {x.dtype}")
    x = floating(x)
    _check_shape(tuple(x.shape), kind, name)
    if not bool(xp.all(xp.isfinite(x))):
        check_finite(to_host(x), name)
    if kind == "scores":
        return InputBatch(logits=xp.stack([xp.zeros_like(x), x], axis=1))
    if kind == "logits":
        return InputBatch(logits=x)
    check_probabilities_on_device(x, name)
    return InputBatch(probabilities=x)


def check_probabilities_on_device(p, name: str = "probabilities") -> None:
    """``check_probabilities`` of an array on its device; a failure is redone on a host copy,
    which raises the same precise error as numpy input would."""
    xp = namespace(p)
    if not bool(xp.all(xp.abs(xp.sum(p, axis=1) - 1.0) <= ROW_SUM_TOLERANCE) & xp.all(p >= 0)):
        check_probabilities(to_host(p).astype(np.float64), name)


def check_labels(labels, n: int, k: int) -> np.ndarray:
    """Labels as int64 class indices in ``[0, k)``, one per row (a host numpy array, whatever
    array library they came in)."""
    array = to_host(labels) if not is_numpy(labels) else np.asarray(labels)
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
