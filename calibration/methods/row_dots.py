"""Row sums and row dot products of a block of rows, into float64 vectors: the reductions of the
passes over the logits (``shifted_logits.moments``, ``brier_temperature``), in float64 or, for a
scouting pass, in float32.

* ``add_rows``: float64 blocks accumulate in float64 (``row_sums``); float32 blocks
  by numpy's pairwise summation in float32 (error ~1e-7 relative at 50000 classes, where a
  float64 accumulator costs a cast an entry), or, one long row at a time, as dots with ones.
* ``row_products``: the sums of products of the rows of several vectors with several others,
  each a BLAS matrix product of pieces of the rows of at most ``DOT_ENTRIES`` float64 or
  ``SCOUT_DOT_ENTRIES`` float32 entries (``padded_width``), their partial sums added in float64.
  OpenBLAS runs these small products on the calling thread, so no BLAS thread is woken (on a
  loaded machine those waits were most of a fit), and they cost about a third of the separate
  sums and ``einsum`` dots they replace (docs/benchmarks.md). In float32 the short pieces keep
  the accumulation's error near pairwise summation's: ``einsum`` along a whole row of 50000
  classes moved the Brier scouts' Hermite root 40% further from the optimum.
"""

from __future__ import annotations

import functools

import numpy as np

DOT_ENTRIES = 8192  # the longest float64 BLAS dot product taken at once (OpenBLAS threads those over 10000)
SCOUT_DOT_ENTRIES = 512  # the longest float32 one (accumulated in float32)


def row_sums(block: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The float64 sums of a block's rows, by numpy's pairwise summation, not a BLAS matrix-vector
    product: called once per small block, a BLAS product wakes the library's threads each time,
    and on a loaded machine that wait was most of a fit (2048 x 32000: 9.2 s against 0.83 s with
    one BLAS thread)."""
    return np.add.reduce(block, axis=1, dtype=np.float64, out=out)


def padded_width(k: int, dtype) -> int:
    """The row length, at least ``k``, that ``row_products`` splits into equal pieces with no
    entries left over (``ceil(k / pieces) * pieces``, fewer than ``pieces`` more than ``k``):
    buffers that wide, zero past ``k``, take each block's products in one BLAS call."""
    parts = -(-k // (DOT_ENTRIES if np.dtype(dtype) == np.float64 else SCOUT_DOT_ENTRIES))
    return parts * -(-k // parts)


def add_rows(block: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The sums of ``block``'s rows into float64 ``out`` (module docstring). A float32 block of one
    row in equal pieces (``padded_width``) is summed as BLAS dots of its pieces with ones, at half
    the time of the pairwise sum over 50000 classes (5 against 9 us); over many short rows the
    pairwise sum is the faster (6.7 against 8.1 us for 32 x 1000)."""
    if block.dtype == np.float64:
        return row_sums(block, out)
    rows, k = block.shape
    parts = -(-k // SCOUT_DOT_ENTRIES)
    if rows == 1 and parts > 1 and k % parts == 0:
        partial = np.matmul(block.reshape(parts, k // parts), _ones(k // parts))
        out[0] = np.add.reduce(partial, dtype=np.float64)
        return out
    out[...] = np.add.reduce(block, axis=1)
    return out


@functools.cache
def _ones(width: int) -> np.ndarray:
    return np.ones(width, np.float32)


def row_products(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Every product of a row of one vector of ``left`` with the same row of one of ``right``:
    ``out[r, i, j] = sum_c left[i, r, c] right[j, r, c]``, float64 of shape ``(rows, m, n)`` for
    ``left`` of shape ``(m, rows, k)`` and ``right`` of ``(n, rows, k)``, ``k`` a ``padded_width``
    (equal pieces, no entry left over; else ``ValueError``). One BLAS matrix product an
    ``(m x w) (w x n)`` piece (``matmul`` over a strided view: nothing copied), its partial sums
    added in float64: the m x n sums of a row block cost about one read of the vectors (1.1 ns an
    entry for the 4 x 6 of ETS's quadratic pass, where 13 separate sums and dots took 3.0).
    OpenBLAS runs a product of at most 4 x 6 x 8192 on the calling thread (measured)."""
    m, rows, k = left.shape
    parts = -(-k // (DOT_ENTRIES if left.dtype == np.float64 else SCOUT_DOT_ENTRIES))
    if k % parts:
        raise ValueError(f"rows of {k} entries are not a padded_width")
    width = k // parts
    pieces = left.reshape(m, rows, parts, width).transpose(1, 2, 0, 3)
    others = right.reshape(len(right), rows, parts, width).transpose(1, 2, 3, 0)
    return np.add.reduce(np.matmul(pieces, others), axis=1, dtype=np.float64)
