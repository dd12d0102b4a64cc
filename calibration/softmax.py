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
