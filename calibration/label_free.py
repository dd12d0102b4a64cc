"""The label-free drift alarm with an estimated reference: the games of ``calibration.monitoring``
on ``max_j p_tj - c0_hat`` and ``p_tj - m_hat_j``, where ``c0_hat`` and ``m_hat`` are the mean
top-label confidence and mean class probabilities of ``n_ref`` reference rows (e.g. the labelled
rows a calibrator was checked on), valid for any ``n_ref``.

**Null hypothesis**: at every step the stream's expected confidence is within ``eps`` of the
reference population's ``c0 = E_ref[max_j p_j]`` and each expected class probability within
``eps_c`` of ``m_j = E_ref[p_j]``.

**Split alpha** (a union bound): the reference spends ``alpha_ref = share * alpha``. Each of its
``k + 1`` means gets a two-sided confidence bound ``|c0_hat - c0| <= r_0`` (level ``alpha_ref / 2``)
and ``|m_hat_j - m_j| <= r_j`` (level ``alpha_ref / (2k)`` each), so that all hold together with
probability at least ``1 - alpha_ref``. On that event the stream's residuals against the
estimates have conditional means within ``eps + r_0`` and ``eps_c + r_j`` under the null, so the
e-process of ``DriftTest`` with those widened tolerances at level ``alpha - alpha_ref`` is a
supermartingale there (the reference is independent of the stream), and

    P(ever alarm) <= alpha_ref + (alpha - alpha_ref) = alpha.

The bounds are the empirical-Bernstein confidence sequence of Waudby-Smith & Ramdas (2023),
``calibration.sequential.empirical_bernstein_cs`` (valid at any ``n``; the radius is the larger
distance from the sample mean to an end of the interval); they shrink like ``sd sqrt(log(1/d)/n)``,
so a class of small, steady probabilities costs little tolerance.

**What a reference can see**: a drift of the expected confidence by ``d`` is detectable (the
e-process grows under it, given enough stream rows) only if ``d > eps + r_0``; ``rows_needed``
gives the smallest ``n_ref`` whose ``r_0`` (for a spread ``sd``) is below ``d - eps``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .metrics._inputs import probabilities_and_labels
from .monitoring import DriftTest
from .sequential import empirical_bernstein_cs

MAX_TOLERANCE = 0.99  # a widened tolerance is capped here: a game at 0.99 practically never alarms


def _radii(values: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """The largest distance from each row's sample mean to an end of its confidence interval at
    ``levels`` (rows: statistics in [0, 1], columns: observations)."""
    radius = np.empty(len(values))
    for level in np.unique(levels):
        rows = np.flatnonzero(levels == level)
        lower, upper = empirical_bernstein_cs(values[rows], alpha=float(level))
        mean = values[rows].mean(axis=1)
        radius[rows] = np.maximum(mean - lower[:, -1], upper[:, -1] - mean)
    return radius


@dataclass(frozen=True)
class LabelFreeReference:
    """The reference's mean confidence and class means with their radii, and the false-alarm
    probability ``alpha`` they spend (all radii hold together with probability ``1 - alpha``)."""

    confidence: float
    mean: np.ndarray
    rows: int
    confidence_radius: float
    class_radius: np.ndarray
    confidence_sd: float
    alpha: float

    def to_dict(self) -> dict:
        return {"confidence": self.confidence, "mean": self.mean.tolist(), "rows": self.rows,
                "confidence_radius": self.confidence_radius, "class_radius": self.class_radius.tolist(),
                "confidence_sd": self.confidence_sd, "alpha": self.alpha}

    @classmethod
    def from_dict(cls, data: dict) -> LabelFreeReference:
        return cls(float(data["confidence"]), np.asarray(data["mean"], dtype=np.float64), int(data["rows"]),
                   float(data["confidence_radius"]), np.asarray(data["class_radius"], dtype=np.float64),
                   float(data["confidence_sd"]), float(data["alpha"]))


def reference_of(probs, alpha: float) -> LabelFreeReference:
    """The reference summary of calibrated probabilities ``probs`` (``n_ref x k``, rows in any order
    that makes them exchangeable) with bounds holding together with probability ``1 - alpha``."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    p, _ = probabilities_and_labels(probs, None)
    if len(p) < 1:
        raise ValueError("the reference needs at least one row")
    k = p.shape[1]
    values = np.clip(np.concatenate([p.max(axis=1)[None, :], p.T]), 0.0, 1.0)
    levels = np.concatenate([[alpha / 2], np.full(k, alpha / (2 * k))])
    radius = _radii(values, levels)
    return LabelFreeReference(float(values[0].mean()), values[1:].mean(axis=1), len(p), float(radius[0]),
                              radius[1:], float(values[0].std()), alpha)


def label_free_test(reference_probs, alpha: float = 0.01, tolerance: float = 0.02, class_tolerance: float = 0.02,
                    half_life: float = 1000.0, max_bet: float = 0.5, share: float = 0.5,
                    shape: tuple = ()) -> tuple[DriftTest, LabelFreeReference]:
    """The label-free e-process against ``reference_probs`` valid at ``alpha`` overall: the reference
    spends ``share * alpha``, the returned ``DriftTest`` (feed it ``residuals(probs, reference)``)
    runs at the rest with tolerances widened by the reference's radii."""
    if not 0 < share < 1:
        raise ValueError(f"share must lie in (0, 1), got {share!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    reference = reference_of(reference_probs, share * alpha)
    widened = min(tolerance + reference.confidence_radius, MAX_TOLERANCE)
    class_widened = np.minimum(class_tolerance + reference.class_radius, MAX_TOLERANCE)
    test = DriftTest(alpha=(1 - share) * alpha, tolerance=widened, half_life=half_life,
                     max_bet=min(max_bet, 0.5), shape=shape, n_classes=len(reference.mean),
                     class_tolerance=class_widened)
    return test, reference


def residuals(probs, reference: LabelFreeReference) -> tuple[np.ndarray, np.ndarray]:
    """``max_j p_ij - c0_hat`` and ``p_ij - m_hat_j`` of unlabelled rows, for ``DriftTest.update``."""
    p, _ = probabilities_and_labels(probs, None)
    if p.shape[1] != len(reference.mean):
        raise ValueError(f"the reference has {len(reference.mean)} classes, the rows {p.shape[1]}")
    return p.max(axis=1) - reference.confidence, p - reference.mean


def rows_needed(drift: float, tolerance: float = 0.02, alpha: float = 0.01, share: float = 0.5,
                sd: float = 0.5, limit: int = 10**7) -> int | None:
    """The smallest number of reference rows whose confidence radius (for a spread ``sd`` of the
    top-label confidence, at the level ``reference_of`` gives it) is below ``drift - tolerance``:
    the reference the alarm needs to see a drift ``drift`` of the expected confidence. ``None``
    when ``drift <= tolerance`` (never) or more than ``limit`` rows would be needed."""
    if not 0 < sd <= 0.5:
        raise ValueError(f"sd must lie in (0, 0.5], got {sd!r}")
    margin = drift - tolerance
    if margin <= 0:
        return None

    def radius(n: int) -> float:  # a sequence with exactly this mean and spread
        x = 0.5 + sd * np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
        lower, upper = empirical_bernstein_cs(x, alpha=share * alpha / 2)
        return float(max(0.5 - lower[-1], upper[-1] - 0.5))

    low, high = 1, 2
    while radius(high) >= margin:
        low, high = high, 2 * high
        if high > limit:
            return None
    while high - low > max(1, low // 200):  # to within 0.5%
        middle = (low + high) // 2
        low, high = (low, middle) if radius(middle) < margin else (middle, high)
    return high
