"""Row sums and sums of products of the rows of a block, into float64: the reductions of the
passes over the logits (``shifted_logits.moments``, ``brier_temperature``), in float64 or, for a
scouting pass, in float32.

* ``row_products``: the sums of products of the rows of several vectors with several others.
  Over rows of more than ``SHORT_ROW`` entries, BLAS matrix products of pieces of at most
  ``DOT_ENTRIES`` float64 or ``SCOUT_DOT_ENTRIES`` float32 entries (``padded_width``), their
  partial sums added in float64: OpenBLAS runs these small products on the calling thread, so
  no BLAS thread is woken (on a loaded machine those waits were most of a fit), and on a CPU with
  AVX-512 (OpenBLAS's small-matrix kernels) they cost about a third of the separate sums and
  ``einsum`` dots they replace. Without it a BLAS product a row costs about what four dots do, so
  float64 rows of at most ``ROW_DOT_PAIRS`` pairs (the moments' four) take ``vecdot`` dots and row
  sums there, and ETS's thirteen BLAS pieces (docs/benchmarks.md). In float32 the short pieces
  keep the accumulation's error near pairwise summation's: ``einsum`` along a whole row of 50000
  classes moved the Brier scouts' Hermite root 40% further from the optimum. Shorter rows:
  ``einsum`` row dots.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

DOT_ENTRIES = 8192  # the longest float64 BLAS dot product taken at once (OpenBLAS threads those over 10000)
SCOUT_DOT_ENTRIES = 512  # the longest float32 one (accumulated in float32)
SHORT_ROW = 32  # rows up to this long are summed by einsum, a pair at a time (row_products)


def _has_avx512() -> bool:
    """Whether numpy found AVX-512 (``AVX512F``) on this CPU; ``False`` where it cannot say."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:  # numpy's internal module moved: the products every CPU takes well
        return False
    return bool(__cpu_features__.get("AVX512F", False))


ROW_DOT_PAIRS = 0 if _has_avx512() else 4  # float64 row products of at most this many pairs: vecdot row dots


def row_sums(block: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The float64 sums of a block's rows, by numpy's pairwise summation (``ShiftedLogits``' row
    means), not one BLAS matrix-vector product a block: over rows of more than 10000 entries that
    wakes the library's threads each time, and on a loaded machine that wait was most of a fit
    (2048 x 32000: 9.2 s against 0.83 s with one BLAS thread)."""
    return np.add.reduce(block, axis=1, dtype=np.float64, out=out)


def padded_width(k: int, dtype) -> int:
    """The row length, at least ``k``, that ``row_products`` splits into equal pieces with no
    entries left over (``ceil(k / pieces) * pieces``, fewer than ``pieces`` more than ``k``):
    buffers that wide, zero past ``k``, take a block's products in one ``matmul`` call."""
    parts = -(-k // (DOT_ENTRIES if np.dtype(dtype) == np.float64 else SCOUT_DOT_ENTRIES))
    return parts * -(-k // parts)


def row_products(left: np.ndarray, right: np.ndarray, pairs: Sequence[tuple[int, int]], out: np.ndarray,
                 ones: tuple[int | None, int | None] = (None, None)) -> np.ndarray:
    """The sums over each row of the products ``left[i] * right[j]`` for each ``(i, j)`` of ``pairs``,
    into ``out`` (float64, ``(rows, len(pairs))``) for ``left`` of shape ``(m, rows, k)`` and
    ``right`` of ``(n, rows, k)``, ``k`` a ``padded_width`` (equal pieces, no entry left over; else
    ``ValueError``).

    Rows of more than ``SHORT_ROW`` entries: BLAS matrix products of ``(m x w) (w x n)`` pieces (one
    a row piece, ``matmul`` over a strided view: nothing copied), their partial sums added in
    float64; all m x n sums cost about one read of the vectors (1.1 ns an entry for ETS's 4 x 6,
    where 13 separate sums and dots took 3.0), and OpenBLAS runs products of at most 4 x 6 x 8192
    on the calling thread. Shorter rows: one ``einsum`` row dot a pair (BLAS calls a row cost more
    than they save there: at 1e6 x 10 float32 a moments pass took 121 ms, now 60); float64 rows of
    at most ``ROW_DOT_PAIRS`` pairs: ``vecdot`` row dots in pieces of ``DOT_ENTRIES``. There a
    pair with the vector ``ones`` names (its index in ``left``, in ``right``; ``None``: none), all
    ones where the other is not zero, is the row sum of the other (``row_sums``: one read where a
    dot takes two)."""
    m, rows, k = left.shape
    if k <= SHORT_ROW:
        for slot, (i, j) in enumerate(pairs):
            out[:, slot] = np.einsum("rk,rk->r", left[i], right[j])
        return out
    parts = -(-k // (DOT_ENTRIES if left.dtype == np.float64 else SCOUT_DOT_ENTRIES))
    if k % parts:
        raise ValueError(f"rows of {k} entries are not a padded_width")
    if left.dtype == np.float64 and len(pairs) <= ROW_DOT_PAIRS:  # pieces of DOT_ENTRIES: OpenBLAS threads longer dots
        for slot, (i, j) in enumerate(pairs):
            if i == ones[0] or j == ones[1]:
                row_sums(right[j] if i == ones[0] else left[i], out[:, slot])
            elif parts == 1:
                np.vecdot(left[i], right[j], out=out[:, slot])
            else:
                shape = (rows, parts, k // parts)
                np.add.reduce(np.vecdot(left[i].reshape(shape), right[j].reshape(shape)), axis=1, out=out[:, slot])
        return out
    width, n = k // parts, len(right)
    pieces = left.reshape(m, rows, parts, width).transpose(1, 2, 0, 3)
    others = right.reshape(n, rows, parts, width).transpose(1, 2, 3, 0)
    products = np.add.reduce(np.matmul(pieces, others), axis=1, dtype=np.float64).reshape(rows, m * n)
    return np.take(products, _flat(tuple(pairs), n), axis=1, out=out)


@functools.cache
def _flat(pairs: tuple[tuple[int, int], ...], n: int) -> np.ndarray:
    """The columns of ``pairs`` in products of ``n`` right vectors laid out flat (``i * n + j``)."""
    return np.array([i * n + j for i, j in pairs])
