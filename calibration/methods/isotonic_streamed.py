"""``isotonic_knots`` without the sorted copy of all the scores: the same knots, bit for bit, from
scores that can be made again block by block (IRM's softmax of a fold's rows), holding one value
range of them at a time (issue #19: IRM's sorted float64 copy of a 40000 x 1000 fold's
probabilities was 1.6x the float32 array's bytes, the largest holder of ``auto`` from the log).

The scores' value range is cut at ``RANGES - 1`` pivots (quantiles of a strided sample). Range by
range, in increasing order, the scores of each block that fall in it are gathered and sorted: a
stretch of the whole sorted array, whose global offset is the count of the ranges before it.
Over that stretch the clusters' start flags (``isotonic_knots.cluster_flags``: the comparison of each
value with the one before it) are set in one global flag array, the wide runs that end in it are
walked, and the positives in the range are located; the run still open at its end is carried
into the next stretch, so that every run is walked with all its values. A second pass over the
ranges reads the values at the kept clusters' starts. Each step computes what ``isotonic_knots``
computes on the whole sorted array, at the same positions, so the knots are the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from .isotonic_knots import BLOCK, MERGE_ATOL, MERGE_RTOL, StartIndex, pava_knots

RANGES = 8
SAMPLE = 1 << 16  # about this many values sampled for the pivots


def _stretches(blocks: Callable[[], Iterator[np.ndarray]], pivots: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """``(range, sorted values of the range)`` for each range in increasing order: range ``r``
    holds the values ``v`` with ``pivots[r - 1] < v <= pivots[r]`` (``np.searchsorted(pivots, v)``
    is ``r``). Nothing of a stretch stays referenced here while the caller holds it."""
    bounds = [-np.inf, *pivots.tolist(), np.inf]
    for r in range(len(pivots) + 1):
        low, high = bounds[r], bounds[r + 1]
        parts = [values[(values > low) & (values <= high)] for values in blocks()]
        stretch = [np.concatenate(parts)]
        del parts
        stretch[0].sort()
        yield r, stretch.pop()


def streamed_knots(blocks: Callable[[], Iterator[np.ndarray]], n: int, positives: np.ndarray, ranges: int = RANGES,
                   atol: float = MERGE_ATOL, rtol: float = MERGE_RTOL) -> tuple[np.ndarray, np.ndarray]:
    """``isotonic_knots.isotonic_knots(np.sort(all values), positives)`` where ``blocks()`` yields the
    ``n`` values (1-D float64 arrays) afresh each time it is called, in ``ranges`` value ranges."""
    stride = max(1, n // SAMPLE)
    sample = np.sort(np.concatenate([values[::stride].copy() for values in blocks()]))  # not views of the blocks
    pivots = np.unique(sample[(np.arange(1, ranges) * len(sample)) // ranges])
    del sample
    start = np.zeros(n, dtype=bool)
    at = np.empty(len(positives), dtype=np.int64)
    positive_range = np.searchsorted(pivots, positives, side="left")  # as _stretches' ranges
    carry, carry_at, offsets = np.empty(0), 0, []  # the open run's values and its global position
    offset = 0
    for r, stretch in _stretches(blocks, pivots):
        offsets.append(offset)
        if not len(stretch):
            continue
        values = np.concatenate([carry, stretch]) if len(carry) else stretch
        base = carry_at  # global position of values[0]
        first_new = len(carry)
        del stretch
        carry = np.empty(0)
        # start flags of the new values: each compared with the value before it
        if offset == 0:
            start[0] = True
        for a in range(max(first_new, 1), len(values), BLOCK):
            b = min(a + BLOCK, len(values))
            previous = values[a - 1:b - 1]
            start[base + a:base + b] = ~(values[a:b] - previous <= atol + rtol * np.abs(previous))
        offset += len(values) - first_new
        # the runs that close here: from each start to the next one, the last still open
        firsts = np.flatnonzero(start[base:base + len(values)])
        closing = r == len(pivots) or offset == n
        run_first, run_last = firsts[:-1], firsts[1:] - 1
        if closing:
            run_first, run_last = firsts, np.append(firsts[1:] - 1, len(values) - 1)
        _walk(values, run_first, run_last, start, base, atol, rtol)
        # the positives of this range
        here = np.flatnonzero(positive_range == r)
        at[here] = base + np.searchsorted(values, positives[here], side="right") - 1
        if not closing:
            carry_at = base + int(firsts[-1])
            carry = values[firsts[-1]:].copy()
        del values, firsts
    index = StartIndex(start)
    clusters = index.total
    holding = index.cluster_of(at)
    hit, hits = np.unique(holding, return_counts=True)
    kept = np.unique(np.concatenate([hit, hit - 1, hit + 1, [0, clusters - 1]]))
    kept = kept[(kept >= 0) & (kept < clusters)]
    bounds = np.append(index.start_of(kept), n)
    del index, start
    values = np.empty(len(kept))
    offsets.append(n)
    for r, stretch in _stretches(blocks, pivots):  # the values at the kept clusters' starts
        inside = (bounds[:-1] >= offsets[r]) & (bounds[:-1] < offsets[r] + len(stretch))
        values[inside] = stretch[bounds[:-1][inside] - offsets[r]]
    counts = np.diff(bounds).astype(np.float64)
    return pava_knots(values, counts, kept, hit, hits)


def _walk(values: np.ndarray, run_first: np.ndarray, run_last: np.ndarray, start: np.ndarray, base: int,
          atol: float, rtol: float) -> None:
    """``cluster_flags``' walk of the wide runs among ``[run_first, run_last]`` (positions in
    ``values``, which holds every value of each run; ``base`` is the global position of
    ``values[0]``), setting their clusters' start flags."""
    longer = run_last > run_first
    run_first, run_last = run_first[longer], run_last[longer]
    narrow = values[run_last] - values[run_first] <= atol + rtol * np.abs(values[run_first])
    wide_first, wide_last = run_first[~narrow], run_last[~narrow]
    for j in range(0, len(wide_first), BLOCK):
        i, last = wide_first[j:j + BLOCK], wide_last[j:j + BLOCK]
        while len(i):
            start[base + i] = True
            limit = values[i] + atol + rtol * np.abs(values[i])
            i = np.searchsorted(values, limit, side="right")
            going = i <= last
            i, last = i[going], last[going]
