"""Proper scores and summary statistics of probabilistic predictions.

* ``brier``: ``mean_i sum_j (p_ij - [y_i = j])^2``, summed over classes as in the
  expectation-consistency paper and scikit-learn (pycalib divides this by k).
* ``nll``: ``-mean_i log max(p_{i, y_i}, EPSILON)`` (natural log), with ``EPSILON = 2**-52`` the
  probability floor of ``calibration.probability_floor`` (what every calibrator's output is
  floored at, and what scikit-learn's ``log_loss`` clips at): finite, at most ``log(1/EPSILON)``
  = 36.04 nats per row, and equal to the plain ``-mean log p_{i, y_i}`` wherever no label's
  probability is below ``EPSILON``.
* ``accuracy``: fraction of rows whose argmax (first index among ties) is the label.
* ``top_n_accuracy``: fraction of rows whose label ranks among the ``n`` highest
  probabilities, ties ranked by the lower class index.
* ``mean_confidence``: mean of the highest probability of each row.
* ``expectation_consistency_gap``: ``mean_confidence - accuracy`` (Clarté et al. 2023).
* ``calibration_gain``: ``brier(raw) - brier(calibrated)`` on one evaluation set, the ΔECE²
  of Mix-n-Match (Zhang et al. 2020, eq. 8): for a map that keeps the ranking of predictions
  it is the drop in squared calibration error; positive means the map helped.
* ``tail_risk``: ``mean_i sum_{j: c_ij < 1e-6 r_ij} r_ij log(r_ij / c_ij)`` of calibrated
  probabilities ``c`` against reference ones ``r`` (the support guard of ``calibration.selection``).
"""

from __future__ import annotations

import numpy as np

from ..backend import device, label_entries, namespace, row_dot, to_host
from ..probability_floor import EPSILON
from ._inputs import is_float32_matrix, labelled_probabilities, probabilities_and_labels, top_label_of
from .validated import row_blocks

UNSUPPORTED_RATIO = 1e-6
TINY = 1e-300


def label_ranks(values, labels: np.ndarray) -> np.ndarray:
    """Rank of each label in its row (0 = highest), ties broken by the lower class index; computed
    on ``values``' device, returned on the host."""
    xp, where = namespace(values), device(values)
    v_y = label_entries(values, labels)[:, None]
    y = xp.asarray(labels, device=where)[:, None]
    ahead = (values > v_y) | ((values == v_y) & (xp.arange(values.shape[1], device=where)[None, :] < y))
    return to_host(xp.count_nonzero(ahead, axis=1))


def float32_labelled(probs, labels) -> tuple[np.ndarray, np.ndarray]:
    """A validated float32 numpy ``(n, k)`` as it is (no float64 copy) and its labels."""
    return probabilities_and_labels(probs, labels, keep_float32=True)


def squared_norms(p: np.ndarray) -> np.ndarray:
    """``<p_i, p_i>`` per row of a float32 ``p``, each block of rows widened to float64 (exact)
    and reduced as ``row_dot`` reduces the float64 matrix's rows."""
    out = np.empty(p.shape[0])
    for rows in row_blocks(*p.shape):
        block = p[rows].astype(np.float64)
        out[rows] = row_dot(block, block)
    return out


def brier(probs, labels) -> float:
    if is_float32_matrix(probs):
        p, y = float32_labelled(probs, labels)
        return float(np.mean(squared_norms(p) - 2.0 * label_entries(p, y).astype(np.float64) + 1.0))
    p, y, _ = labelled_probabilities(probs, labels)
    return float(namespace(p).mean(row_dot(p, p) - 2.0 * label_entries(p, y) + 1.0))


def nll(probs, labels) -> float:
    if is_float32_matrix(probs):
        p, y = float32_labelled(probs, labels)
        return float(-np.mean(np.log(np.maximum(label_entries(p, y).astype(np.float64), EPSILON))))
    p, y, _ = labelled_probabilities(probs, labels)
    xp = namespace(p)
    entries = label_entries(p, y)
    return float(-xp.mean(xp.log(xp.maximum(entries, xp.full_like(entries, EPSILON)))))


def accuracy(probs, labels) -> float:
    if is_float32_matrix(probs):  # widening keeps the order and the ties: the same argmax
        p, y = float32_labelled(probs, labels)
        return float(np.mean((np.argmax(p, axis=1) == y).astype(np.float64)))
    p, _, y = labelled_probabilities(probs, labels)
    xp = namespace(p)
    return float(xp.mean(xp.astype(xp.argmax(p, axis=1) == y, xp.float64)))


def top_n_accuracy(probs, labels, n: int = 5) -> float:
    p, y = probabilities_and_labels(probs, labels)
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    return float(np.mean(label_ranks(p, y) < n))


def mean_confidence(probs, labels=None) -> float:
    """Labels are accepted (and checked) for a uniform signature, not used."""
    if is_float32_matrix(probs):
        p, _ = float32_labelled(probs, labels)
        return float(np.mean(np.max(p, axis=1).astype(np.float64)))
    p, _, _ = labelled_probabilities(probs, labels)
    xp = namespace(p)
    return float(xp.mean(xp.max(p, axis=1)))


def expectation_consistency_gap(probs, labels) -> float:
    confidence, correct = top_label_of(probs, labels)
    return float(np.mean(confidence) - np.mean(correct))


def calibration_gain(raw_probs, calibrated_probs, labels) -> float:
    if np.shape(raw_probs) != np.shape(calibrated_probs):
        raise ValueError(
            f"raw and calibrated probabilities differ in shape: {np.shape(raw_probs)} vs "
            f"{np.shape(calibrated_probs)}"
        )
    return brier(raw_probs, labels) - brier(calibrated_probs, labels)


def tail_risk(calibrated: np.ndarray, reference: np.ndarray) -> float:
    """The expected extra NLL per row, were the labels drawn from ``reference``, from the
    entries where ``calibrated`` is more than ``1 / UNSUPPORTED_RATIO`` times more certain that
    the class is wrong: ``mean_i sum_{j: c_ij < 1e-6 r_ij} r_ij log(r_ij / c_ij)`` (``c`` floored
    at ``TINY``). Such claims are orders of magnitude beyond anything the validation rows can
    check; held-out NLL cannot see them when no held-out label falls there, this can
    (``calibration.selection``, the support guard)."""
    return mean_tail_risk(tail_risk_terms(calibrated, reference), len(calibrated))


def tail_risk_terms(calibrated: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """The nonzero terms ``r_ij log(r_ij / c_ij)`` of ``tail_risk`` for these rows, in row-major
    order (so the terms of consecutive row blocks, concatenated, are those of all the rows)."""
    parts = [np.empty(0)]
    for rows in row_blocks(*calibrated.shape):
        c, r = calibrated[rows], reference[rows]
        small = c < UNSUPPORTED_RATIO * r
        c, r = np.maximum(c[small], TINY), r[small]
        parts.append(r * np.log(r / c))
    return np.concatenate(parts)


def mean_tail_risk(terms: np.ndarray, n: int) -> float:
    """``tail_risk`` of ``n`` rows from all their ``tail_risk_terms``."""
    return float(np.sum(terms) / n) if len(terms) else 0.0
