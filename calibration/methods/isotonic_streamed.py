"""``isotonic_knots`` without the sorted copy of all the scores: the same knots, bit for bit, from
scores that can be made again block by block (IRM's softmax of a fold's rows), holding one value
range of them at a time (a sorted float64 copy of a fold's probabilities would be 1.6x the
float32 array's bytes, the largest holder of ``auto`` from the log).

The scores' value range is cut at ``RANGES - 1`` pivots (quantiles of a strided sample), and one
pass counts the scores of each range. Range by range, in increasing order, the scores of each
block that fall in it are gathered into one array of that size and sorted: a stretch of the whole
sorted array, whose global offset is the count of the ranges before it. Over that stretch the
clusters' start flags (``isotonic_knots.cluster_flags``: the comparison of each value with the one
before it) are set in one global flag array, the wide runs that end in it are walked (their
starts read a chunk of positions at a time), and the positives in the range are located; the run
still open at its end is carried into the next stretch, so that every run is walked with all its
values. A second pass over the ranges that hold a kept cluster's start reads the values there.
Each step computes what ``isotonic_knots`` computes on the whole sorted array, at the same
positions, so the knots are the same.

Memory: the flags (one byte per score) and one range's values (float64) at a time. On a 40000 x
1000 fold that is 0.5x the float32 array's bytes: the ranges are not gathered as parts and
joined, the carried run is not prepended by another copy, and run positions are not held as
int64.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from .isotonic_knots import BLOCK, StartIndex, apart, pava_knots, walk_runs

RANGES = 8
SAMPLE = 1 << 16  # about this many values sampled for the pivots
EMPTY = np.empty(0)


def _range_sizes(blocks: Callable[[], Iterator[np.ndarray]], pivots: np.ndarray) -> list[int]:
    """How many of the values fall in each range: range ``r`` holds the values ``v`` with
    ``pivots[r - 1] < v <= pivots[r]`` (``np.searchsorted(pivots, v)`` is ``r``)."""
    sizes = np.zeros(len(pivots) + 1, dtype=np.int64)
    for values in blocks():
        sizes += np.bincount(np.searchsorted(pivots, values, side="left"), minlength=len(sizes))
    return sizes.tolist()


def _gathered(blocks: Callable[[], Iterator[np.ndarray]], low: float, high: float, size: int,
              head: np.ndarray = EMPTY) -> np.ndarray:
    """``head``, then the ``size`` values ``v`` with ``low < v <= high`` sorted: one array, filled
    block by block (no list of parts beside it)."""
    out = np.empty(len(head) + size)
    out[:len(head)] = head
    at = len(head)
    for values in blocks():
        part = values[(values <= high) if low == -np.inf else (values > low) & (values <= high)]  # -inf in range 0
        out[at:at + len(part)] = part
        at += len(part)
    if at != len(out):  # counted by searchsorted, which ranks NaN last, and in no range here
        raise ValueError("isotonic regression scores must not be NaN")
    out[len(head):].sort()
    return out


def streamed_knots(blocks: Callable[[], Iterator[np.ndarray]], n: int, positives: np.ndarray, ranges: int = RANGES,
                   chunk: int = BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """``isotonic_knots.isotonic_knots(np.sort(all values), positives)`` where ``blocks()`` yields the
    ``n`` values (1-D float64 arrays) afresh each time it is called, in ``ranges`` value ranges; the
    runs of a range are found ``chunk`` positions at a time."""
    stride = max(1, n // SAMPLE)
    sample = np.sort(np.concatenate([values[::stride].copy() for values in blocks()]))  # not views of the blocks
    pivots = np.unique(sample[(np.arange(1, ranges) * len(sample)) // ranges])
    del sample
    bounds = [-np.inf, *pivots.tolist(), np.inf]
    sizes = _range_sizes(blocks, pivots)
    start = np.zeros(n, dtype=bool)
    at = np.empty(len(positives), dtype=np.int64)
    positive_range = np.searchsorted(pivots, positives, side="left")  # as the ranges are cut
    carry, carry_at, offsets = EMPTY, 0, []  # the open run's values and its global position
    offset = 0
    for r, size in enumerate(sizes):
        offsets.append(offset)
        if not size:
            continue
        values = _gathered(blocks, bounds[r], bounds[r + 1], size, carry)
        base = carry_at  # global position of values[0]
        first_new = len(carry)
        carry = EMPTY
        if offset == 0:
            start[0] = True
        _flag_starts(values, first_new, start, base)
        offset += len(values) - first_new
        closing = r == len(pivots) or offset == n
        open_first = _walk_runs(values, start, base, closing, chunk)
        # the positives of this range
        here = np.flatnonzero(positive_range == r)
        at[here] = base + np.searchsorted(values, positives[here], side="right") - 1
        if not closing:
            carry_at = base + open_first
            carry = values[open_first:].copy()
        del values
    index = StartIndex(start)
    clusters = index.total
    holding = index.cluster_of(at)
    hit, hits = np.unique(holding, return_counts=True)
    kept = np.unique(np.concatenate([hit, hit - 1, hit + 1, [0, clusters - 1]]))
    kept = kept[(kept >= 0) & (kept < clusters)]
    ends = np.append(index.start_of(kept), n)
    del index, start
    values = np.empty(len(kept))
    for r, size in enumerate(sizes):  # the values at the kept clusters' starts, in the ranges that hold one
        inside = (ends[:-1] >= offsets[r]) & (ends[:-1] < offsets[r] + size)
        if inside.any():
            values[inside] = _gathered(blocks, bounds[r], bounds[r + 1], size)[ends[:-1][inside] - offsets[r]]
    counts = np.diff(ends).astype(np.float64)
    return pava_knots(values, counts, kept, hit, hits)


def _flag_starts(values: np.ndarray, first_new: int, start: np.ndarray, base: int) -> None:
    """The start flags of ``values[first_new:]`` (``base`` is the global position of ``values[0]``):
    each value compared with the one before it (no view of ``values`` outlives this call)."""
    for a in range(max(first_new, 1), len(values), BLOCK):
        b = min(a + BLOCK, len(values))
        start[base + a:base + b] = apart(values[a:b], values[a - 1:b - 1])


def _walk_runs(values: np.ndarray, start: np.ndarray, base: int, closing: bool, chunk: int) -> int:
    """``_walk`` of the runs of ``values`` (from each start flag to the next) that close in it, all
    of them when ``closing``, their starts read ``chunk`` positions at a time (no array of every
    run's first and last position); the first position of the run left open when not ``closing``."""
    pending = np.empty(0, dtype=np.int64)
    for a in range(0, len(values), chunk):
        b = min(a + chunk, len(values))
        firsts = np.concatenate([pending, np.flatnonzero(start[base + a:base + b]) + a])
        if closing and b == len(values):
            _walk(values, firsts, np.append(firsts[1:] - 1, len(values) - 1), start, base)
            return -1
        _walk(values, firsts[:-1], firsts[1:] - 1, start, base)
        pending = firsts[-1:]
    return int(pending[0])


def _walk(values: np.ndarray, run_first: np.ndarray, run_last: np.ndarray, start: np.ndarray, base: int) -> None:
    """``cluster_flags``' walk of the wide runs among ``[run_first, run_last]`` (positions in
    ``values``, which holds every value of each run; ``base`` is the global position of
    ``values[0]``), setting their clusters' start flags."""
    wide = apart(values[run_last], values[run_first])
    walk_runs(values, run_first[wide], run_last[wide], start, base)
