"""Isotonic regression of 0/1 targets on scores, as knots: scikit-learn's ties pooled, then PAVA.

The isotonic map is the non-decreasing ``g`` minimising ``sum_i (g(s_i) - t_i)^2`` for 0/1
targets ``t_i``; the pool-adjacent-violators algorithm (Ayer et al. 1955; Barlow et al. 1972;
``scipy.optimize.isotonic_regression``) computes it exactly, averaging the targets of adjacent
blocks that violate monotonicity. Tied scores are pooled first, by scikit-learn's rule
(``sklearn._isotonic._make_unique``, which ``IsotonicRegression`` applies after sorting):
greedily from the smallest, a cluster takes every score ``x`` with ``x - first < TIE_ATOL``
(``np.finfo(np.float64).resolution`` = 1e-15, an absolute tolerance) of its first score
``first``, and is represented by ``first``. Nothing else is pooled, so the knots are
scikit-learn's (``IsotonicRegression(out_of_bounds="clip")``: its ``X_thresholds_`` and
``y_thresholds_``). The map is stored as knots, the first and last score of each
constant block (as scikit-learn's).

``isotonic_knots`` runs PAVA on the clusters that hold a positive and the two ends of each run
without one (exact: PAVA pools targets of 0 with exact sums), from a flag per sorted score
(``cluster_flags``), counted per block of ``BLOCK`` entries (``StartIndex``) to find a cluster's
number or first position without holding every start.
"""

from __future__ import annotations

import itertools

import numpy as np

#: scikit-learn's ``_make_unique`` pools a score less than this above its cluster's first score
TIE_ATOL = float(np.finfo(np.float64).resolution)
BLOCK = 1 << 16  # entries of one block of differences and runs


def apart(later: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Whether ``later`` starts a new cluster after one that began at ``first`` (scikit-learn's test
    ``later - first >= TIE_ATOL``, in float64: copies of an infinity, whose difference is NaN,
    stay in one cluster, as there)."""
    with np.errstate(invalid="ignore"):  # inf - inf
        return later - first >= TIE_ATOL


def next_starts(ordered: np.ndarray, first: np.ndarray) -> np.ndarray:
    """For clusters beginning at the positions ``first`` of the sorted ``ordered``, the position
    where the next cluster begins: the first ``j`` with ``apart(ordered[j], ordered[first])``, or
    ``len(ordered)``. ``searchsorted`` finds it for the rounded ``ordered[first] + TIE_ATOL``;
    as ``apart`` is monotone in ``later`` (rounding is), a few steps correct it to the exact test."""
    n = len(ordered)
    value = ordered[first]
    at = np.maximum(np.searchsorted(ordered, value + TIE_ATOL, side="left"),
                    np.searchsorted(ordered, value, side="right"))  # every copy of the first joins it
    while True:
        back = (at > first + 1) & apart(ordered[np.maximum(at - 1, 0)], value)
        ahead = (at < n) & ~apart(ordered[np.minimum(at, n - 1)], value)
        if not (back.any() or ahead.any()):
            return at
        at = at - back + ahead


def start_blocks(flags: np.ndarray):
    """The positions of the set flags, a block of ``BLOCK`` flags at a time (int64)."""
    for a in range(0, len(flags), BLOCK):
        yield np.flatnonzero(flags[a:a + BLOCK]) + a


def cluster_flags(ordered: np.ndarray) -> np.ndarray:
    """For sorted ``ordered`` (repeats allowed), a flag where each of scikit-learn's clusters
    begins (see the module docstring). A score ``apart`` from the one before it surely begins
    one; a score closer than that to the one before it begins one only inside a run of such
    scores wider than one cluster, and only those runs are walked (``next_starts``), ``BLOCK``
    runs together, one cluster per round each. The boolean flags are the only array of the
    input's length; the differences and the runs are taken in blocks."""
    n = len(ordered)
    start = np.empty(n, dtype=bool)
    start[0] = True
    for a in range(1, n, BLOCK):
        b = min(a + BLOCK, n)
        start[a:b] = apart(ordered[a:b], ordered[a - 1:b - 1])
    wide_first, wide_last = [], []
    small = np.int32 if n < 2**31 else np.int64
    pending = np.empty(0, dtype=np.int64)
    for found in itertools.chain(start_blocks(start), [None]):  # a run: a start and the values up to the next
        if found is None:
            run_first, run_last = pending, np.full(len(pending), n - 1)
        else:
            found = np.concatenate([pending, found])
            run_first, run_last, pending = found[:-1], found[1:] - 1, found[-1:]
        wide = apart(ordered[run_last], ordered[run_first])
        wide_first.append(run_first[wide].astype(small))
        wide_last.append(run_last[wide].astype(small))
    walk_runs(ordered, np.concatenate(wide_first), np.concatenate(wide_last), start)
    return start


def walk_runs(ordered: np.ndarray, wide_first: np.ndarray, wide_last: np.ndarray, start: np.ndarray,
              base: int = 0) -> None:
    """Set the cluster start flags inside the runs ``[wide_first, wide_last]`` (positions in
    ``ordered``, which holds every score of each run; ``base`` is the flags' position of
    ``ordered[0]``), greedily: each run alone, ``BLOCK`` runs at a time, one cluster per round."""
    for j in range(0, len(wide_first), BLOCK):
        i, last = wide_first[j:j + BLOCK].astype(np.int64), wide_last[j:j + BLOCK]
        while len(i):
            start[base + i] = True
            i = next_starts(ordered, i)
            going = i <= last
            i, last = i[going], last[going]


class StartIndex:
    """Cluster numbers and start positions from ``cluster_flags``' flags alone (no array of all
    the start positions: int32 per cluster, about 0.7 of the entries on softmax scores), by the
    count of flags in each block of ``BLOCK``."""

    def __init__(self, flags: np.ndarray):
        self.flags = flags
        counts = [np.count_nonzero(flags[a:a + BLOCK]) for a in range(0, len(flags), BLOCK)]
        self.before = np.concatenate([[0], np.cumsum(counts)])  # flags before each block
        self.total = int(self.before[-1])

    def cluster_of(self, at: np.ndarray) -> np.ndarray:
        """The number of the cluster holding each position: the flags at or before it, less 1."""
        out = np.empty(len(at), dtype=np.int64)
        block = at // BLOCK
        for b in np.unique(block):
            here = block == b
            counted = np.cumsum(self.flags[b * BLOCK:(b + 1) * BLOCK])
            out[here] = self.before[b] + counted[at[here] - b * BLOCK] - 1
        return out

    def start_of(self, cluster: np.ndarray) -> np.ndarray:
        """The position where each cluster begins."""
        out = np.empty(len(cluster), dtype=np.int64)
        block = np.searchsorted(self.before, cluster, side="right") - 1
        for b in np.unique(block):
            here = block == b
            found = np.flatnonzero(self.flags[b * BLOCK:(b + 1) * BLOCK])
            out[here] = found[cluster[here] - self.before[b]] + b * BLOCK
        return out


def isotonic_knots(ordered: np.ndarray, positives: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Knots ``(xs, ys)`` of the isotonic regression of 0/1 targets on the sorted scores
    ``ordered``, of which ``positives`` are those with target 1, scores pooled by
    ``cluster_flags`` first: each cluster's target is its share of positives, its weight its
    size, and PAVA (``scipy.optimize.isotonic_regression``) fits them in order.

    Only the clusters holding a positive and the two ends of each run of clusters without one
    (the first weighing the run less its last cluster) go to PAVA: at most ``3·len(positives) +
    1`` values, not one per cluster. This is exact, bit for bit. PAVA (Busing 2022, as SciPy
    implements it) pools a target of 0 into the block before it, whose mean is ``>= 0``: the
    block's weighted sum gains ``w·0 = 0`` exactly and its weight an integer, so a run of zeros
    yields the same sums and means whether it comes as one value or many, and it always ends
    in one block, whose value the run's two ends carry as knots."""
    n = len(ordered)
    index = StartIndex(cluster_flags(ordered))
    clusters = index.total
    holding = index.cluster_of(np.searchsorted(ordered, positives, side="right") - 1)
    hit, hits = np.unique(holding, return_counts=True)
    kept = np.unique(np.concatenate([hit, hit - 1, hit + 1, [0, clusters - 1]]))
    kept = kept[(kept >= 0) & (kept < clusters)]
    bounds = np.append(index.start_of(kept), n)
    del index
    values, counts = ordered[bounds[:-1]], np.diff(bounds).astype(np.float64)
    return pava_knots(values, counts, kept, hit, hits)


def pava_knots(values: np.ndarray, counts: np.ndarray, kept: np.ndarray, hit: np.ndarray, hits: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """PAVA on the ``kept`` clusters (first scores ``values``, sizes ``counts``), of which those
    numbered ``hit`` hold ``hits`` positives each: the knots, the first and last cluster of each
    constant block of the fitted map."""
    from scipy.optimize import isotonic_regression  # imported on use: scipy.optimize would slow every start

    targets = np.zeros(len(kept))
    at_hit = np.searchsorted(kept, hit)
    targets[at_hit] = hits / counts[at_hit]
    fitted = isotonic_regression(targets, weights=counts).x
    if len(values) <= 2:
        return values, fitted
    inner = (fitted[1:-1] != fitted[:-2]) | (fitted[1:-1] != fitted[2:])
    keep = np.concatenate([[True], inner, [True]])
    return values[keep], fitted[keep]


def fit_isotonic_binary(x: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Knots ``(xs, ys)`` of the isotonic regression of the 0/1 targets ``positive`` on ``x``,
    scikit-learn's tied scores pooled first (``isotonic_knots``)."""
    return isotonic_knots(np.sort(x), x[positive])
