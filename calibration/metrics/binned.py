"""Binned calibration errors and reliability diagrams.

Binning convention (one for all functions here, as in Guo et al.'s code): ``n_bins``
equal-width bins with edges ``linspace(0, 1, n_bins + 1)``; bin ``b`` holds the confidences
with ``lo_b < c <= hi_b``, except that a confidence of exactly 0 belongs to the first bin.
A confidence of exactly 1 is in the last bin; there is no hidden extra bin.

With ``S_b = sum over bin b of (confidence - correct)`` and ``n_b`` its count:

* ``ece`` (Guo et al. 2017), top-label: L1 ``sum_b |S_b| / n`` = ``sum_b (n_b/n)|conf_b - acc_b|``;
  L2 ``sqrt(sum_b (n_b/n)(conf_b - acc_b)^2)`` (the root is taken).
* ``mce``: ``max_b |conf_b - acc_b|`` over non-empty bins.
* ``adaptive_ece``: as ``ece`` but with equal-count bins: the confidences sorted (stably) and
  split with ``np.array_split`` (the first ``n % n_bins`` bins hold one more). This is the
  equal-mass ECE of Nixon et al. 2019 / Kumar et al. 2019 ("ECE-EM"), not netcal's ``ACE``.
* ``classwise_ece`` (Kull et al. 2019): for each class j, the L1 binned error of
  ``p_j`` against ``[y = j]`` over all rows; the mean of these over classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..inputs import check_probabilities
from ._inputs import probabilities_and_labels, row_blocks, top_label, top_label_of


def equal_width_bin(values: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin index of each value in [0, 1] under the ``(lo, hi]`` convention: the ``b`` with
    ``edges[b] < v <= edges[b + 1]`` for ``edges = linspace(0, 1, n_bins + 1)`` (0 goes to the
    first bin). Exactly ``searchsorted(edges, v) - 1``, clipped; computed as ``ceil(v * n_bins) - 1``
    and then corrected by one where rounding put a value next to an edge on the wrong side
    (arithmetic is O(n), a binary search of unsorted keys several times slower)."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    index = np.ceil(values * n_bins).astype(np.int64)
    np.clip(index, 1, n_bins, out=index)
    index -= 1
    index -= (values <= edges[index]) & (index > 0)
    index += values > edges[index + 1]
    return np.minimum(index, n_bins - 1, out=index)


def equal_count_bins(confidence: np.ndarray, correct: np.ndarray, n_bins: int):
    """Count, confidence sum, number correct, smallest and largest confidence of each
    equal-count bin (``np.array_split`` of the stably sorted confidences; NaN bounds where empty).

    No stable argsort is needed: the sorted values are those of the stable order, and the order
    matters only where a run of equal confidences crosses a bin boundary. The number correct
    before each boundary is counted on the sorted confidences of the correct rows, and such a
    run is split in its original order."""
    n = len(confidence)
    count = np.full(n_bins, n // n_bins)
    count[: n % n_bins] += 1
    ends = np.cumsum(count)
    full = count > 0
    starts = (ends - count)[full]
    ordered = np.sort(confidence)
    confidence_sum = np.zeros(n_bins)
    confidence_sum[full] = np.add.reduceat(ordered, starts)
    lower = np.full(n_bins, np.nan)
    upper = np.full(n_bins, np.nan)
    lower[full], upper[full] = ordered[starts], ordered[ends[full] - 1]
    is_correct = correct.astype(bool)
    at = ordered[np.minimum(ends, n - 1)]
    correct_before = np.searchsorted(np.sort(confidence[is_correct]), at).astype(np.float64)
    run_start = np.searchsorted(ordered, at)
    for b in np.flatnonzero((ends < n) & (ends > run_start)):
        correct_before[b] += is_correct[np.flatnonzero(confidence == at[b])[: ends[b] - run_start[b]]].sum()
    correct_before[ends == n] = is_correct.sum()
    return count, confidence_sum, np.diff(correct_before, prepend=0.0), lower, upper


def _check_bins(n_bins: int) -> None:
    if isinstance(n_bins, bool) or not isinstance(n_bins, int | np.integer) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")


def _check_norm(norm) -> None:
    if norm not in (1, 2):
        raise ValueError(f"norm must be 1 or 2, got {norm!r}")


def _binned_error(index, confidence, correct, n_bins: int, norm: int) -> float:
    n = len(confidence)
    gaps = np.bincount(index, weights=confidence - correct, minlength=n_bins)
    if norm == 1:
        return float(np.abs(gaps).sum() / n)
    counts = np.bincount(index, minlength=n_bins)
    full = counts > 0
    return float(np.sqrt(np.sum(gaps[full] ** 2 / counts[full]) / n))


def ece(probs, labels, n_bins: int = 15, norm: int = 1) -> float:
    """Top-label expected calibration error, equal-width bins (see the module docstring)."""
    _check_bins(n_bins)
    _check_norm(norm)
    confidence, correct = top_label_of(probs, labels)
    return _binned_error(equal_width_bin(confidence, n_bins), confidence, correct, n_bins, norm)


def top_label_outcomes(probs, labels) -> tuple[np.ndarray, np.ndarray]:
    """Each row's top-label confidence and whether its argmax is the label (float64 n-vectors, on the
    host): what ``ece`` bins, for a caller that keeps them per row (e.g. a sliding window)."""
    return top_label_of(probs, labels)


def ece_of_outcomes(confidence: np.ndarray, correct: np.ndarray, n_bins: int = 15, norm: int = 1) -> float:
    """``ece`` of rows given by ``top_label_outcomes``: the same float as ``ece(probs, labels)`` on the
    same rows in the same order."""
    _check_bins(n_bins)
    _check_norm(norm)
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    if confidence.ndim != 1 or confidence.shape != correct.shape:
        raise ValueError(f"confidence and correct must be vectors of one length, got {confidence.shape} "
                         f"and {correct.shape}")
    return _binned_error(equal_width_bin(confidence, n_bins), confidence, correct, n_bins, norm)


def validated_ece(p: np.ndarray, labels: np.ndarray, n_bins: int = 15) -> float:
    """``ece(p, labels, n_bins)`` of a float64 numpy ``p`` and int64 labels that are already
    validated (rows summing to 1, labels in range): the kernel for a solver that evaluates the
    ECE many times on one labelled set, without checking the same labels at every call."""
    confidence, correct = top_label(p, labels)
    return _binned_error(equal_width_bin(confidence, n_bins), confidence, correct, n_bins, 1)


def adaptive_ece(probs, labels, n_bins: int = 15, norm: int = 1) -> float:
    """Top-label ECE with equal-count bins (see the module docstring)."""
    _check_bins(n_bins)
    _check_norm(norm)
    return adaptive_error(*top_label_of(probs, labels), n_bins, norm)


def adaptive_error(confidence: np.ndarray, correct: np.ndarray, n_bins: int, norm: int = 1) -> float:
    """``adaptive_ece`` of validated top-label confidences and correctness (n-vectors)."""
    count, confidence_sum, hits, _, _ = equal_count_bins(confidence, correct, n_bins)
    full = count > 0
    gaps = confidence_sum[full] - hits[full]
    if norm == 1:
        return float(np.abs(gaps).sum() / len(confidence))
    return float(np.sqrt(np.sum(gaps**2 / count[full]) / len(confidence)))


def mce(probs, labels, n_bins: int = 15) -> float:
    """Maximum calibration error: the largest ``|conf_b - acc_b|`` over non-empty bins."""
    _check_bins(n_bins)
    return maximum_error(*top_label_of(probs, labels), n_bins)


def maximum_error(confidence: np.ndarray, correct: np.ndarray, n_bins: int) -> float:
    """``mce`` of validated top-label confidences and correctness (n-vectors)."""
    index = equal_width_bin(confidence, n_bins)
    gaps = np.bincount(index, weights=confidence - correct, minlength=n_bins)
    counts = np.bincount(index, minlength=n_bins)
    full = counts > 0
    return float(np.max(np.abs(gaps[full]) / counts[full]))


def classwise_ece(probs, labels, n_bins: int = 15) -> float:
    """Classwise ECE (Kull et al. 2019): mean over classes of each class's L1 binned error.

    Only entries above the first bin edge need binning (a row has at most ``n_bins`` of them,
    as it sums to 1); the first bin's sum of each class is its column total minus the rest.
    The entries are selected on their IEEE bit patterns read as unsigned integers, which order
    non-negative floats as the floats do and put every negative float (sign bit set) above the
    edge, so the sign check needs only the selected entries, not a pass over all of them.
    Float32 probabilities are widened a block of rows at a time (no float64 copy of the matrix);
    their column totals are then added block by block, which changes only their rounding.
    """
    _check_bins(n_bins)
    p, y = probabilities_and_labels(probs, labels, nonnegative=False, keep_float32=True)
    n, k = p.shape
    first_edge = np.linspace(0.0, 1.0, n_bins + 1)[1:2]
    flats, parts, column_sums = [], [], np.zeros(k)
    for rows in row_blocks(n, k) if p.dtype == np.float32 else [slice(0, n)]:
        block = np.ascontiguousarray(p[rows], dtype=np.float64)  # float32 widened a block at a time
        flat = np.flatnonzero(block.view(np.uint64) > first_edge.view(np.uint64))
        flats.append(flat + rows.start * k)
        parts.append(block.ravel()[flat])
        column_sums += np.einsum("ij->j", block)
    flat, values = (flats[0], parts[0]) if len(parts) == 1 else (np.concatenate(flats), np.concatenate(parts))
    if values.size and not values.min() >= 0:
        check_probabilities(p)  # raises, naming the first negative entry
    keys = flat % k * n_bins + equal_width_bin(values, n_bins)
    sums = np.bincount(keys, weights=values, minlength=k * n_bins).reshape(k, n_bins)
    sums[:, 0] = column_sums - sums[:, 1:].sum(axis=1)
    label_probs = p[np.arange(n), y].astype(np.float64)
    hits = np.bincount(y * n_bins + equal_width_bin(label_probs, n_bins), minlength=k * n_bins)
    return float(np.abs(sums - hits.reshape(k, n_bins)).sum() / (n * k))


@dataclass
class ReliabilityDiagram:
    """Per-bin statistics of top-label confidence; statistics of empty bins are NaN."""

    strategy: str
    bin_lower: np.ndarray
    bin_upper: np.ndarray
    count: np.ndarray
    mean_confidence: np.ndarray
    accuracy: np.ndarray

    @property
    def gap(self) -> np.ndarray:
        """``mean_confidence - accuracy`` (positive where over-confident)."""
        return self.mean_confidence - self.accuracy

    def to_dict(self) -> dict:
        def plain(values):
            return [None if np.isnan(v) else float(v) for v in values]

        return {
            "strategy": self.strategy,
            "bin_lower": plain(self.bin_lower),
            "bin_upper": plain(self.bin_upper),
            "count": self.count.tolist(),
            "mean_confidence": plain(self.mean_confidence),
            "accuracy": plain(self.accuracy),
            "gap": plain(self.gap),
        }


def reliability_diagram(probs, labels, n_bins: int = 15, strategy: str = "uniform") -> ReliabilityDiagram:
    """Counts, mean confidence and accuracy per bin: ``strategy="uniform"`` uses the equal-width
    bins of ``ece`` (bounds are the bin edges), ``"quantile"`` the equal-count bins of
    ``adaptive_ece`` (bounds are the smallest and largest confidence in each bin)."""
    _check_bins(n_bins)
    return diagram_of(*top_label_of(probs, labels), n_bins, strategy)


def diagram_of(confidence: np.ndarray, correct: np.ndarray, n_bins: int,
               strategy: str = "uniform") -> ReliabilityDiagram:
    """``reliability_diagram`` of validated top-label confidences and correctness (n-vectors)."""
    if strategy == "uniform":
        index = equal_width_bin(confidence, n_bins)
        edges = np.linspace(0.0, 1.0, n_bins + 1)
        lower, upper = edges[:-1], edges[1:]
        count = np.bincount(index, minlength=n_bins)
        confidence_sum = np.bincount(index, weights=confidence, minlength=n_bins)
        hits = np.bincount(index, weights=correct, minlength=n_bins)
    elif strategy == "quantile":
        count, confidence_sum, hits, lower, upper = equal_count_bins(confidence, correct, n_bins)
    else:
        raise ValueError(f"strategy must be 'uniform' or 'quantile', got {strategy!r}")
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_confidence = confidence_sum / count
        accuracy = hits / count
    return ReliabilityDiagram(strategy, lower, upper, count, mean_confidence, accuracy)
