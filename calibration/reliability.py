"""What a readable reliability diagram shows, computed once for every drawing of it (the
matplotlib figure of ``calibration.plot`` and the service's SVG dashboard): per bin a Wilson
interval for the accuracy, whether the bin has too few samples to read (drawn light), a marker
area that grows with the count, and the ECE with a bootstrap interval for the legend.

numpy and scipy only; nothing here draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .metrics._inputs import top_label_of
from .metrics.binned import ReliabilityDiagram, equal_width_bin
from .metrics.bootstrap import Interval, bootstrap_interval

WEAK_COUNT = 30          # a bin with fewer samples than this is drawn light ("few samples")
WEAK_OPACITY = 0.3       # the opacity of a weak bin's marker, interval and bar
MIN_AREA, MAX_AREA = 12.0, 160.0   # marker areas (points squared) of the smallest and largest bin
SERIES_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")  # before, after, ...
DEFAULT_RESAMPLES = 200


def wilson_interval(successes, trials, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson's score interval (Wilson 1927, "Probable inference, the law of succession, and
    statistical inference", JASA 22:209-212) for a binomial proportion, elementwise.

    With ``p = x / n`` successes out of ``n`` trials and ``z`` the standard normal quantile
    ``Φ⁻¹(1 - (1 - confidence) / 2)`` (1.959964 for 95 %)::

        centre    = (p + z² / (2n)) / (1 + z² / n)
        half      = z / (1 + z² / n) · sqrt(p (1 - p) / n + z² / (4 n²))
        interval  = [centre - half, centre + half]

    It stays inside [0, 1] and is not empty at ``p = 0`` or ``p = 1``, unlike the normal
    (Wald) interval — what a reliability bin with 3 samples, all correct, needs. It is
    statsmodels' ``proportion_confint(x, n, method="wilson")``. ``n = 0`` gives NaN.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    x = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    if np.any(n < 0) or np.any(x < 0) or np.any(x > n):
        raise ValueError("successes and trials must satisfy 0 <= successes <= trials")
    from scipy.special import ndtri  # imported on use: scipy.special would slow every start

    z = float(ndtri(1 - (1 - confidence) / 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        p = x / n
        scale = 1 + z * z / n
        centre = (p + z * z / (2 * n)) / scale
        half = z / scale * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        low, high = np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)
    # exactly 0 and 1 at the edges, where the formula is only so up to rounding
    return np.where(x == 0, np.where(n > 0, 0.0, np.nan), low), np.where((x == n) & (n > 0), 1.0, high)


def marker_areas(count) -> np.ndarray:
    """Marker areas (points²) proportional to each bin's count, between ``MIN_AREA`` and
    ``MAX_AREA`` (the fullest bin); an empty bin gets 0."""
    count = np.asarray(count, dtype=np.float64)
    top = count.max() if count.size else 0.0
    if top <= 0:
        return np.zeros_like(count)
    return np.where(count > 0, MIN_AREA + (MAX_AREA - MIN_AREA) * count / top, 0.0)


@dataclass
class ReliabilityBins:
    """One series of a reliability diagram as drawn: the non-empty bins only."""

    lower: np.ndarray
    upper: np.ndarray
    count: np.ndarray
    mean_confidence: np.ndarray
    accuracy: np.ndarray
    accuracy_low: np.ndarray      # Wilson interval of each bin's accuracy
    accuracy_high: np.ndarray
    weak: np.ndarray              # count < WEAK_COUNT
    area: np.ndarray              # marker area, proportional to the count

    @classmethod
    def from_columns(cls, lower, upper, count, mean_confidence, accuracy,
                     confidence: float = 0.95) -> ReliabilityBins:
        """From the columns of ``ReliabilityDiagram`` or of its ``to_dict()`` (``None`` for the
        statistics of an empty bin)."""
        count = np.asarray(count, dtype=np.int64)
        full = count > 0

        def column(values):
            return np.array([np.nan if v is None else v for v in values], dtype=np.float64)[full]

        acc = column(accuracy)
        n = count[full]
        low, high = wilson_interval(np.rint(acc * n), n, confidence)
        return cls(column(lower), column(upper), n, column(mean_confidence), acc, low, high,
                   n < WEAK_COUNT, marker_areas(count)[full])

    @classmethod
    def from_diagram(cls, diagram: ReliabilityDiagram | dict, confidence: float = 0.95) -> ReliabilityBins:
        get = diagram.get if isinstance(diagram, dict) else lambda name: getattr(diagram, name)
        return cls.from_columns(get("bin_lower"), get("bin_upper"), get("count"), get("mean_confidence"),
                                get("accuracy"), confidence)


def _binned_ece(confidence: np.ndarray, correct: np.ndarray, n_bins: int) -> float:
    index = equal_width_bin(confidence, n_bins)
    gaps = np.bincount(index, weights=confidence - correct, minlength=n_bins)
    return float(np.abs(gaps).sum() / confidence.shape[0])


def ece_interval(probs, labels, n_bins: int = 15, n_resamples: int = DEFAULT_RESAMPLES,
                 confidence: float = 0.95, seed: int = 0) -> Interval:
    """The ECE (``calibration.ece``: equal-width bins, L1, weighted by bin size) and its
    percentile bootstrap interval over rows (``bootstrap_interval``); the top label is found
    once, so each resample costs one ``bincount``."""
    conf, correct = top_label_of(probs, labels)
    return bootstrap_interval(_binned_ece, conf, correct, n_resamples=n_resamples, confidence=confidence,
                              seed=seed, n_bins=n_bins)


def ece_interval_from_bins(count, mean_confidence, accuracy, n_resamples: int = DEFAULT_RESAMPLES,
                           confidence: float = 0.95, seed: int = 0) -> Interval:
    """The ECE and an approximate bootstrap interval from the bins alone (a stored report keeps
    bins, not rows): each resample draws ``n`` rows from the ``2 × n_bins`` cells (bin, correct
    or not) with the observed frequencies and scores every row of a bin at the bin's mean
    confidence, ``ECE* = Σ_b |n*_b · conf_b - hits*_b| / n``. It equals the row bootstrap when
    the confidences within a bin are equal; the spread of confidence inside a bin (at most the
    bin's width) is what it leaves out."""
    count = np.asarray(count, dtype=np.int64)
    full = count > 0
    n_b = count[full]
    conf = np.array([np.nan if v is None else v for v in mean_confidence], dtype=np.float64)[full]
    acc = np.array([np.nan if v is None else v for v in accuracy], dtype=np.float64)[full]
    n = int(n_b.sum())
    if n == 0:
        raise ValueError("the bins hold no samples")
    hits = np.rint(acc * n_b)
    estimate = float(np.abs(n_b * conf - hits).sum() / n)
    cells = np.concatenate([hits, n_b - hits]) / n
    rng = np.random.default_rng(seed)
    drawn = rng.multinomial(n, cells / cells.sum(), size=n_resamples)
    hits_star, misses_star = drawn[:, : n_b.size], drawn[:, n_b.size:]
    values = np.abs((hits_star + misses_star) * conf - hits_star).sum(axis=1) / n
    low, high = np.percentile(values, [50 * (1 - confidence), 50 * (1 + confidence)])
    return Interval(estimate, float(low), float(high), confidence, n_resamples)


def top_label_confidences(probs) -> np.ndarray:
    """The top-label confidence of each row (``max(p, 1 - p)`` for binary scores)."""
    values = np.asarray(probs, dtype=np.float64)
    return np.maximum(values, 1 - values) if values.ndim == 1 else values.max(axis=1)


def legend_label(name: str, interval: Interval) -> str:
    """``before (ECE 21.45%) 95% CI 19.80–23.10%`` — the legend entry of one series."""
    return (f"{name} (ECE {100 * interval.estimate:.2f}%) {round(100 * interval.confidence)}% CI "
            f"{100 * interval.low:.2f}–{100 * interval.high:.2f}%")
