"""Isotonic regression of 0/1 targets on scores, as knots: near-equal scores pooled, then PAVA.

The isotonic map is the non-decreasing ``g`` minimising ``sum_i (g(s_i) - t_i)^2`` for 0/1
targets ``t_i``; the pool-adjacent-violators algorithm (Ayer et al. 1955; Barlow et al. 1972;
``scipy.optimize.isotonic_regression``) computes it exactly, averaging the targets of adjacent
blocks that violate monotonicity. Scores are pooled first: greedily from the smallest, each score
within ``MERGE_ATOL + MERGE_RTOL·|s|`` of a cluster's first score ``s`` joins that cluster
(``cluster_starts``), so consecutive knots are more than that apart (the map's slope stays
bounded; ``calibration.methods.isotonic`` says why). The map is stored as knots, the first and
last score of each constant block (as scikit-learn's ``IsotonicRegression``).

``isotonic_knots`` runs PAVA on the clusters that hold a positive and the two ends of each run
without one (exact: PAVA pools targets of 0 with exact sums), from a flag per sorted score
(``cluster_flags``), counted per block of ``BLOCK`` entries (``StartIndex``) to find a cluster's
number or first position without holding every start.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.optimize import isotonic_regression

MERGE_ATOL = 1e-15
MERGE_RTOL = 5e-7
BLOCK = 1 << 16  # entries of one block of differences and runs


def positions(flags: np.ndarray) -> np.ndarray:
    """``np.flatnonzero(flags)``, as int32 where the positions fit (half the bytes), in blocks."""
    out = np.empty(np.count_nonzero(flags), dtype=np.int32 if len(flags) < 2**31 else np.int64)
    at = 0
    for a in range(0, len(flags), BLOCK):
        found = np.flatnonzero(flags[a:a + BLOCK]) + a
        out[at:at + len(found)] = found
        at += len(found)
    return out


def cluster_starts(ordered: np.ndarray, atol: float = MERGE_ATOL, rtol: float = MERGE_RTOL) -> np.ndarray:
    """The positions of ``cluster_flags``' flags."""
    return positions(cluster_flags(ordered, atol, rtol))


def start_blocks(flags: np.ndarray):
    """The positions of the set flags, a block of ``BLOCK`` flags at a time (int64)."""
    for a in range(0, len(flags), BLOCK):
        yield np.flatnonzero(flags[a:a + BLOCK]) + a


def cluster_flags(ordered: np.ndarray, atol: float = MERGE_ATOL, rtol: float = MERGE_RTOL) -> np.ndarray:
    """For sorted ``ordered`` (repeats allowed), a flag where each cluster begins:
    greedily from the smallest, a cluster takes every value within ``atol + rtol·|start|`` of
    its first value ``start`` (as scikit-learn's ``_make_unique`` does with an absolute
    tolerance). The first values of consecutive clusters are then more than that apart, and a
    cluster begins at the first copy of a value. A value closer than that to the one before it
    starts no cluster unless its run of such values is wider than one cluster; only those runs
    are walked, ``BLOCK`` runs together, one cluster per round each. The boolean flags are the
    only array of the input's length; the differences and the runs are taken in blocks."""
    n = len(ordered)
    start = np.empty(n, dtype=bool)
    start[0] = True
    for a in range(1, n, BLOCK):
        b = min(a + BLOCK, n)
        previous = ordered[a - 1:b - 1]
        np.less_equal(ordered[a:b] - previous, atol + rtol * np.abs(previous), out=start[a:b])
        np.logical_not(start[a:b], out=start[a:b])
    wide_first, wide_last = [], []
    small = np.int32 if n < 2**31 else np.int64
    pending = np.empty(0, dtype=np.int64)
    for found in itertools.chain(start_blocks(start), [None]):  # a run: a start and the values up to the next
        if found is None:
            run_first, run_last = pending, np.full(len(pending), n - 1)
        else:
            found = np.concatenate([pending, found])
            run_first, run_last, pending = found[:-1], found[1:] - 1, found[-1:]
        longer = run_last > run_first
        run_first, run_last = run_first[longer], run_last[longer]
        narrow = ordered[run_last] - ordered[run_first] <= atol + rtol * np.abs(ordered[run_first])
        wide_first.append(run_first[~narrow].astype(small))
        wide_last.append(run_last[~narrow].astype(small))
    wide_first, wide_last = np.concatenate(wide_first), np.concatenate(wide_last)
    for j in range(0, len(wide_first), BLOCK):  # each run walked alone: BLOCK runs at a time
        i, last = wide_first[j:j + BLOCK], wide_last[j:j + BLOCK]
        while len(i):
            start[i] = True
            limit = ordered[i] + atol + rtol * np.abs(ordered[i])
            i = np.searchsorted(ordered, limit, side="right")
            going = i <= last
            i, last = i[going], last[going]
    return start


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
    scores within ``cluster_starts``' tolerance pooled first (``isotonic_knots``)."""
    return isotonic_knots(np.sort(x), x[positive])
