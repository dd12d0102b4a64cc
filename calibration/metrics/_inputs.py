"""Validation of the ``(probabilities, labels)`` pair every metric takes.

Metrics reduce a batch to a few numbers: probabilities in another array library (torch on a
GPU, ...) are copied to the host once, here, and everything after runs in numpy float64."""

from __future__ import annotations

import numpy as np

from ..backend import is_numpy, to_host
from ..inputs import as_float_array, check_labels, check_probabilities


def probabilities_and_labels(probs, labels, nonnegative: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """Float64 probabilities ``(n, k)`` and int64 labels; binary ``(n,)`` input is the
    probability of class 1 and becomes ``[1 - p, p]``. ``labels=None`` checks the probabilities
    alone; ``nonnegative=False`` leaves the sign check to the caller (see ``check_probabilities``)."""
    p = as_float_array(probs if is_numpy(probs) else to_host(probs), "probabilities")
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


def top_label(p: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top-label confidence (the highest probability) and whether the argmax (first index
    among ties) is the label."""
    predicted = p.argmax(axis=1)
    confidence = p[np.arange(p.shape[0]), predicted]
    return confidence, (predicted == labels).astype(np.float64)
