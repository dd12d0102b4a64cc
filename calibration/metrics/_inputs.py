"""Validation of the ``(probabilities, labels)`` pair every metric takes.

Probabilities in another array library (torch on a GPU, ...) are validated on their device.
Brier, NLL, accuracy and mean confidence reduce them there to one number; the binned and
kernel metrics reduce them there to the n-vectors of top-label confidence and correctness,
which cross to the host; classwise ECE and top-N accuracy copy them to the host.

Float32 numpy probabilities are validated as they are and never copied whole to float64: the
metrics widen the entries they read (exact), n at a time or a block of rows (``row_blocks``) at a
time, and accumulate in float64."""

from __future__ import annotations

from typing import Any, overload

import numpy as np

from ..backend import device, floating, is_numpy, namespace, to_host
from ..inputs import as_float_array, check_labels, check_probabilities, check_probabilities_on_device

BLOCK_ENTRIES = 1 << 19  # entries of one row block: 4 MiB in float64 (the report then holds 0.6x a 50000 x 100
# float32 matrix at its peak, 1.2x with 16 MiB blocks, and is no slower)


def row_blocks(n: int, k: int, entries: int = BLOCK_ENTRIES):
    """Slices of consecutive rows, about ``entries`` entries each (at least one row)."""
    step = max(1, entries // max(k, 1))
    return [slice(start, min(start + step, n)) for start in range(0, n, step)]


@overload
def probabilities_and_labels(probs: Any, labels: None, nonnegative: bool = True,
                             keep_float32: bool = False) -> tuple[np.ndarray, None]: ...


@overload
def probabilities_and_labels(probs: Any, labels: Any, nonnegative: bool = True,
                             keep_float32: bool = False) -> tuple[np.ndarray, np.ndarray]: ...


def probabilities_and_labels(probs: Any, labels: Any, nonnegative: bool = True,
                             keep_float32: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """Float64 probabilities ``(n, k)`` and int64 labels; binary ``(n,)`` input is the
    probability of class 1 and becomes ``[1 - p, p]``. ``labels=None`` checks the probabilities
    alone; ``nonnegative=False`` leaves the sign check to the caller (see ``check_probabilities``).
    ``keep_float32=True`` returns a numpy float32 ``(n, k)`` as it is (no float64 copy), for a
    caller that reads only some of its entries and widens those."""
    if keep_float32 and is_float32_matrix(probs):
        p = probs
    else:
        p = as_float_array(probs if is_numpy(probs) else to_host(floating(probs)), "probabilities")
    if p.ndim == 1:
        p = np.column_stack([1.0 - p, p])
    if p.ndim != 2:
        raise ValueError(f"probabilities must be (n, k) or binary (n,), got shape {p.shape}")
    if p.shape[0] == 0:
        raise ValueError("probabilities is empty: it has no rows")
    if p.shape[1] < 2:
        raise ValueError(f"probabilities must have at least 2 classes, got {p.shape[1]}")
    check_probabilities(p, nonnegative=nonnegative)
    return p, None if labels is None else check_labels(labels, p.shape[0], p.shape[1])


def is_float32_matrix(probs) -> bool:
    """Whether ``probs`` is a float32 numpy ``(n, k)`` array (read as it is, a block at a time)."""
    return isinstance(probs, np.ndarray) and probs.dtype == np.float32 and probs.ndim == 2


def labelled_probabilities(probs, labels):
    """``(p, labels on the host, labels next to p)``: for numpy input what
    ``probabilities_and_labels`` gives; an array on a device stays there, in float64, validated
    there (its errors are those numpy input would get)."""
    if is_numpy(probs):
        p, y = probabilities_and_labels(probs, labels)
        return p, y, y
    xp = namespace(probs)
    p = xp.astype(floating(probs), xp.float64)
    if p.ndim == 1:
        p = xp.stack([1.0 - p, p], axis=1)
    if p.ndim != 2 or p.shape[0] == 0 or p.shape[1] < 2:
        probabilities_and_labels(probs, labels)  # raises the shape error numpy input would get
    check_probabilities_on_device(p)
    y = None if labels is None else check_labels(labels, p.shape[0], p.shape[1])
    return p, y, None if y is None else xp.asarray(y, device=device(p))


def top_label_of(probs, labels) -> tuple[np.ndarray, np.ndarray]:
    """Validated top-label confidence and correctness as host float64 n-vectors (computed on
    the device for an array that has one, so only these vectors cross to the host)."""
    if is_numpy(probs):
        return top_label(*probabilities_and_labels(probs, labels, nonnegative=False, keep_float32=True))
    p, y, _ = labelled_probabilities(probs, labels)
    xp = namespace(p)
    return to_host(xp.max(p, axis=1)), (to_host(xp.argmax(p, axis=1)) == y).astype(np.float64)


def top_label(p: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top-label confidence (the highest probability, as float64) and whether the argmax (first
    index among ties) is the label; raises on a negative entry. ``p`` is float64 or float32 (the
    n confidences are widened exactly, so both give the values of ``p.astype(float64)``).

    The argmax is taken over the IEEE bit patterns read as unsigned integers. They order
    non-negative floats as the floats do and put every entry with the sign bit set (a negative
    number, or -0.0) above them all, so a row holding one shows it as its top entry: the sign
    check reads the n top entries, not all n·k."""
    rows = np.arange(p.shape[0])
    predicted = np.ascontiguousarray(p).view(np.uint32 if p.dtype == np.float32 else np.uint64).argmax(axis=1)
    confidence = p[rows, predicted].astype(np.float64)
    if np.signbit(confidence).any():
        check_probabilities(p)  # raises, naming the first row with a negative entry
        predicted = p.argmax(axis=1)  # only -0.0 entries: the float order is the right one
        confidence = p[rows, predicted].astype(np.float64)
    return confidence, (predicted == labels).astype(np.float64)
