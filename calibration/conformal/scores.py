"""Conformity scores of classification and the split-conformal quantile.

A score ``s(x, y)`` is large when the label ``y`` is unusual for the probabilities ``p = p(x)``.
Every score here is defined for all ``k`` labels of a row at once (``all_scores``, ``(n, k)``); the
score of a labelled row is the entry of its label, so calibration and prediction use one rule.

- **LAC** (least ambiguous set-valued classifier; Sadinle, Lei & Wasserman 2019, JASA 114(525)):
  ``s(x, y) = 1 - p_y``.
- **APS** (adaptive prediction sets; Romano, Sesia & Candes 2020, NeurIPS): with the classes sorted by
  decreasing ``p`` (ties: the lower index first) and ``r(y)`` the 1-based rank of ``y``,
  ``s(x, y) = sum_{j: r(j) <= r(y)} p_j - u p_y``: the probability mass down to and including ``y``,
  less ``u p_y``. Non-randomised ``u = 0``; randomised, one ``u ~ U[0, 1]`` per row (the paper's ``U``).
- **RAPS** (regularised APS; Angelopoulos, Bates, Malik & Jordan 2021, ICLR, eq. 5 / Algorithm 2):
  the APS score plus ``lam * max(r(y) - k_reg, 0)``, which makes unlikely labels far down the ranking
  expensive, so that sets stay small where the tail of ``p`` is noisy. ``lam = 0`` is APS.

**The split-conformal threshold** (Vovk, Gammerman & Shafer 2005; Papadopoulos et al. 2002): with
calibration scores ``S_1..S_n`` exchangeable with a test score, ``q = S_(m)``, the ``m``-th smallest,
``m = ceil((n + 1)(1 - alpha))`` (the empirical quantile at level ``m / n``), gives
``1 - alpha <= P(s(X, Y) <= q) < 1 - alpha + 1/(n + 1)`` (the upper bound when scores have no ties).
When ``m > n`` (fewer than ``1/alpha - 1`` calibration rows) no finite threshold has the guarantee:
``q = +inf`` and every set holds all classes.
"""

from __future__ import annotations

import math
from typing import Any, overload

import numpy as np

from ..metrics._inputs import probabilities_and_labels

SCORES = ("lac", "aps", "raps")


@overload
def checked_probabilities(probs: Any, labels: None = None) -> tuple[np.ndarray, None]: ...


@overload
def checked_probabilities(probs: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]: ...


def checked_probabilities(probs: Any, labels: Any = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Float64 ``(n, k)`` probabilities (rows need not be renormalised) and int64 labels in ``[0, k)``."""
    return probabilities_and_labels(probs, labels)


def uniforms_for(n: int, uniforms=None, seed=None) -> np.ndarray:
    """One ``U[0, 1]`` draw per row: the given ``uniforms`` (``(n,)``, each in ``[0, 1]``) or drawn from
    ``numpy.random.default_rng(seed)``. A randomised score needs one of the two (reproducible sets)."""
    if uniforms is not None:
        u = np.asarray(uniforms, dtype=np.float64)
        if u.shape != (n,) or not np.all((u >= 0) & (u <= 1)):
            raise ValueError(f"uniforms must be {n} numbers in [0, 1], one per row")
        return u
    if seed is None:
        raise ValueError("randomised scores need uniforms (one per row) or a seed")
    return np.random.default_rng(seed).random(n)


def all_scores(p: np.ndarray, score: str, k_reg: int = 0, lam: float = 0.0,
               u: np.ndarray | None = None) -> np.ndarray:
    """The ``(n, k)`` scores of every label of every row (see the module). ``u``: one uniform per row
    (randomised APS/RAPS) or None (``u = 0``)."""
    if score == "lac":
        return 1.0 - p
    if score not in SCORES:
        raise ValueError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
    k = p.shape[1]
    order = np.argsort(-p, axis=1, kind="stable")
    ordered = np.take_along_axis(p, order, axis=1)
    sorted_scores = np.cumsum(ordered, axis=1)
    if u is not None:
        sorted_scores -= u[:, None] * ordered
    if score == "raps" and lam > 0:
        sorted_scores += lam * np.maximum(np.arange(1, k + 1) - k_reg, 0)
    out = np.empty_like(sorted_scores)
    np.put_along_axis(out, order, sorted_scores, axis=1)
    return out


def label_scores(p: np.ndarray, labels: np.ndarray, score: str, k_reg: int = 0, lam: float = 0.0,
                 u: np.ndarray | None = None) -> np.ndarray:
    """``s(x_i, y_i)`` per row: the entry of ``all_scores`` at the label."""
    return all_scores(p, score, k_reg, lam, u)[np.arange(len(labels)), labels]


def quantile_rank(n: int, alpha: float) -> int:
    """``m = ceil((n + 1)(1 - alpha))``: the rank of the calibration score that is the threshold."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    return math.ceil((n + 1) * (1 - alpha))


def conformal_quantile(scores, alpha: float) -> float:
    """The split-conformal threshold ``S_(m)``, ``m = ceil((n + 1)(1 - alpha))``; ``+inf`` when ``m > n``
    (too few calibration scores for the level: every set is all classes)."""
    s = np.asarray(scores, dtype=np.float64).ravel()
    if np.isnan(s).any():
        raise ValueError("scores must not be NaN")
    m = quantile_rank(len(s), alpha)
    if m > len(s):
        return math.inf
    return float(np.partition(s, m - 1)[m - 1])
