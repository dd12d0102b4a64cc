"""Max-shifted softmax and log-softmax over the last axis, in the input's float dtype and
array namespace (numpy, torch, ...).

``softmax(z)_j = exp(z_j - max(z)) / sum_l exp(z_l - max(z))``: subtracting the row maximum
keeps every exponent <= 0, so logits of any size (1e4, 1e300) neither overflow nor give NaN.
"""

from __future__ import annotations

import math

import numpy as np

from .backend import namespace


def softmax(z, *, overwrite: bool = False):
    """``overwrite=True`` lets a numpy ``z`` that the caller no longer needs hold the result
    (no new array: on the serving path each 64 x 1000 temporary costs a pass and an allocation)."""
    xp = namespace(z)
    if xp is np:
        if z.dtype.kind != "f":
            z, overwrite = z.astype(np.float64), True
        e = z if overwrite else np.empty_like(z)
        np.subtract(z, z.max(axis=-1, keepdims=True), out=e)
        np.exp(e, out=e)
    else:
        e = xp.exp(z - xp.max(z, axis=-1, keepdims=True))
    e /= xp.sum(e, axis=-1, keepdims=True)
    return e


# an entry of ``scaled_softmax_as`` may be this much (relative) below its lower bound: exp's rounding
SAFETY = 1.0 + 1e-12


def scaled_softmax_as(z: np.ndarray, temperature: float, dtype, floor: float,
                      row_range: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, bool]:
    """``softmax(z / temperature)`` of a finite 2-D numpy float batch, computed in float64.

    Returns ``(p, True)`` with ``p`` in ``dtype``, equal bit for bit to the float64 softmax cast to
    ``dtype``, when every float64 entry is surely ``>= floor``: the final division writes ``dtype``
    itself (numpy rounds each float64 quotient once, as ``astype`` does), so no float64 copy of the
    answer is made nor cast. Otherwise (an entry may be below ``floor``, or something overflowed)
    ``(p, False)`` with ``p`` the float64 softmax, for the caller's floor rule.

    The row maximum and minimum are read on ``z`` itself (float32 reads half the bytes): widening is
    exact and a correctly rounded division by ``temperature > 0`` and a subtraction are monotone,
    so ``fl(max(z) / T)`` is the maximum of ``fl(z / T)``, and ``exp(fl(fl(min(z) / T) - m)) / s``
    bounds each row's smallest probability to within exp's rounding (``SAFETY``). ``row_range``:
    ``z``'s row maxima and minima (shape (n, 1)) where the caller has them."""
    if row_range is None:
        row_range = z.max(axis=-1, keepdims=True), z.min(axis=-1, keepdims=True)
    z_max, z_min = row_range
    e = np.divide(z, temperature, dtype=np.float64)
    top = np.divide(z_max, temperature, dtype=np.float64)
    np.subtract(e, top, out=e)
    np.exp(e, out=e)
    total = e.sum(axis=-1, keepdims=True)
    least = np.exp(np.divide(z_min, temperature, dtype=np.float64) - top) / total
    if least.min() > floor * SAFETY:  # NaN (an overflow) fails
        out = np.empty(e.shape, dtype)
        np.divide(e, total, out=out, casting="same_kind")
        return out, True
    e /= total
    return e, False


def log_softmax(z):
    xp = namespace(z)
    shifted = z - xp.max(z, axis=-1, keepdims=True)
    return shifted - xp.log(xp.sum(xp.exp(shifted), axis=-1, keepdims=True))


def predicted_class(probabilities, logits=None):
    """Argmax of each row, ties broken deterministically.

    Among the classes sharing a row's highest probability, the one with the highest input
    logit wins, then the lowest index. With this rule an accuracy-preserving calibrator
    predicts exactly the classes of its input, even where rounding ties two probabilities.
    """
    xp = namespace(probabilities)
    if logits is None:
        return xp.argmax(probabilities, axis=-1)
    top = probabilities == xp.max(probabilities, axis=-1, keepdims=True)
    return xp.argmax(xp.where(top, logits, xp.full_like(logits, -math.inf)), axis=-1)
