"""The probability floor: no served probability is exactly zero.

**The constant** ``EPSILON = 2**-52 ~ 2.22e-16``, float64's machine epsilon
(``numpy.finfo(numpy.float64).eps``). It is the value scikit-learn's ``log_loss`` clips
probabilities at, so ``calibration.nll`` (which floors the true class's probability at
``EPSILON``) agrees with it to 1e-15 on any input, zeros included. It is also the smallest floor
that leaves every probability a method computes untouched unless that probability is below the
resolution of the numbers near 1: a row is changed only where an entry is below ``EPSILON``, and
then its other entries move by a relative ``<= k EPSILON``. A larger floor (say 1e-6) would tighten
the bound below but change served probabilities that are legitimately small.

**The rule**, row by row, on ``p`` (``n x k``, rows summing to 1):

    q_ij = max(p_ij, EPSILON) / sum_l max(p_il, EPSILON)

Rows whose entries are all ``>= EPSILON`` are returned bit for bit. In a floored row every entry is
``>= EPSILON / (1 + k EPSILON) > 0`` and the row sums to 1 (to rounding). **The argmax is kept,
ties included**: division by one positive number is monotone in floating point, so no entry
overtakes the row's maximum; but two entries one ulp apart can round to one value, and where that
gives the maximum a new tie, the entries that were the maximum are multiplied by
``1 + EPSILON`` (one or two ulps up) so that the set of classes at the maximum is exactly the
original one (``numpy.argmax`` and ``softmax.predicted_class`` give the same class as before).

**What it bounds.** The NLL of a row, ``-log max(q_iy, EPSILON)``, lies in
``[0, log(1/EPSILON)] = [0, 36.04]`` nats, so the paired difference of two calibrators' row NLLs lies
in ``[-LOG_BOUND, LOG_BOUND]``: the range of the promotion test's confidence sequence
(``calibration.sequential``), with no clipping.

(``inputs.PROBABILITY_FLOOR = 1e-12`` is another thing: the floor under *input* probabilities
before a method takes their log.)
"""

from __future__ import annotations

import math

import numpy as np

from .backend import label_entries, namespace
from .inputs import InputBatch

EPSILON = float(np.finfo(np.float64).eps)
LOG_BOUND = -math.log(EPSILON)


def clear_of_floor(probabilities: np.ndarray) -> bool:
    """Whether every entry of a numpy array is finite and ``>= EPSILON``: then the floor leaves it
    bit for bit and nothing overflowed. Two reductions over the whole array (its minimum and
    maximum; NaN fails both comparisons), cheaper than the row minima and the sum that find which
    rows to floor or where a non-finite entry is."""
    return bool(np.minimum.reduce(probabilities, axis=None) >= EPSILON) and \
        bool(np.maximum.reduce(probabilities, axis=None) < math.inf)


def floor_probabilities(probabilities):
    """``(floored, n_rows_floored)``: ``probabilities`` (any Array API array, rows summing to 1)
    with the floor rule applied (see the module), and how many rows it changed. A numpy array is
    floored in one copy (plus boolean masks), with no other temporary of its size."""
    xp = namespace(probabilities)
    low = xp.min(probabilities, axis=1) < EPSILON
    n_floored = int(xp.sum(xp.astype(low, xp.int64)))
    if n_floored == 0:
        return probabilities, 0
    was_top = probabilities == xp.max(probabilities, axis=1, keepdims=True)
    if xp is np:
        out = np.maximum(probabilities, EPSILON)  # rows without an entry below EPSILON: unchanged
        out /= np.where(low, out.sum(axis=1), 1.0)[:, None]  # x / 1.0 is x: those rows stay bit for bit
    else:
        raised = xp.maximum(probabilities, xp.full_like(probabilities, EPSILON))
        scaled = raised / xp.sum(raised, axis=1, keepdims=True)
        out = xp.where(xp.reshape(low, (-1, 1)), scaled, probabilities)
    raise_top = was_top & xp.any((out == xp.max(out, axis=1, keepdims=True)) & ~was_top, axis=1, keepdims=True)
    if xp is np:
        return np.multiply(out, 1.0 + EPSILON, out=out, where=raise_top), n_floored
    return xp.where(raise_top, out * (1.0 + EPSILON), out), n_floored


def fit_floor_counts(probabilities, labels) -> tuple[int, int]:
    """On a fit's own rows, from its unfloored ``probabilities``: ``(rows the floor changes, rows
    whose label got probability exactly 0)``; the second makes the unfloored NLL infinite."""
    xp = namespace(probabilities)
    low = xp.min(probabilities, axis=1) < EPSILON
    zero = label_entries(probabilities, labels) == 0
    return int(xp.sum(xp.astype(low, xp.int64))), int(xp.sum(xp.astype(zero, xp.int64)))


# the margin of ``rows_not_cleared``'s bound over the rounding of the row sums, exp and weights
FLOOR_SAFETY = 1.0 + 1e-9


def rows_not_cleared(logits: np.ndarray, terms: list[tuple[float, float]], offset: float) -> np.ndarray:
    """The rows (indices) of a numpy batch of logits whose prediction
    ``sum_(w, t) w softmax(z / t) + offset / k`` may have an entry below ``EPSILON`` or a label
    entry of 0. Each step of that prediction is monotone in a row's logit (rounding is monotone),
    so the row's smallest entry is at its smallest logit ``z_min``, and a softmax's denominator is
    a sum of ``k`` terms ``<= 1``: the entry is at least
    ``(sum w exp(z_min/t - z_max/t) + offset) / k`` (to a few ulps, ``FLOOR_SAFETY``). Rows where
    that clears ``EPSILON`` are neither floored nor give their label 0."""
    top = np.asarray(logits.max(axis=1), dtype=np.float64)
    least = np.asarray(logits.min(axis=1), dtype=np.float64)
    bound = np.full(len(top), float(offset))
    with np.errstate(under="ignore", invalid="ignore"):
        for weight, temperature in terms:
            bound += weight * np.exp(least / temperature - top / temperature)
    return np.flatnonzero(~(bound / logits.shape[1] >= EPSILON * FLOOR_SAFETY))  # NaN is not cleared


def floor_counts_of_uncleared(count, scores: InputBatch, labels: np.ndarray, terms: list[tuple[float, float]],
                              offset: float) -> tuple[int, int]:
    """``count(scores, labels)`` (a calibrator's floor counts over a fit's rows) of only the rows that
    ``rows_not_cleared``'s bound for the prediction ``terms``, ``offset`` does not clear; of every
    row off numpy or from probabilities, where the bound is not taken."""
    if scores.xp is not np or scores.source != "logits":
        return count(scores, labels)
    unsure = rows_not_cleared(scores.given, terms, offset)
    if not len(unsure):
        return 0, 0
    return count(InputBatch(logits=scores.given[unsure]), labels[unsure])
