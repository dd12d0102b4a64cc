"""Logits shifted by their row maxima, ``d = z - max_j z``, and the row sums over
``exp(beta d) d^j`` that temperature scaling's solvers need (``calibration.methods.temperature``):
on the host a block of rows at a time, never materialising ``d``; on an Array API device
(``DeviceShiftedLogits``) in float64 there, with only vectors of row values coming to the host.
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..backend import device, label_entries, namespace, on_cpu, to_host
from ..inputs import PROBABILITY_FLOOR, InputBatch
from ..softmax import softmax
from .row_dots import padded_width, row_products, row_sums

CHUNK_ELEMENTS = 1 << 15
# d's floor in float32 passes: below it exp(beta d) is 0 for every beta the solvers try (>= 1e-6),
# as at d itself, and d^2 stays finite in float32 (masked entries of -1e30 or -3.4e38 would not)
SCOUT_D_FLOOR = -1e18
# the moments' row sums as products of 1, d (left) with e, e d, e d^2 (right; a 2 x 3 product ran
# faster than the 3 x 2): how many of each an order needs, and which product each s_j = sum e d^j
# is (no d^2 is formed: it overflows float64 for |d| > 1.3e154, and 0 * inf is NaN where e d^2 is 0)
MOMENT_VECTORS = {0: (1, 1), 1: (2, 1), 2: (2, 2), 3: (2, 3)}
MOMENTS = {0: ((0, 0),), 1: ((0, 0), (1, 0)), 2: ((0, 0), (1, 0), (1, 1)), 3: ((0, 0), (1, 0), (1, 1), (1, 2))}


class FlooredLogProbabilities:
    """The logits ``log(max(p, PROBABILITY_FLOOR))`` of numpy probabilities ``p`` (float32 widened,
    or float64), computed in float64 for the rows or entries read, as ``InputBatch.logits``
    computes them for the whole batch (the same numbers), so that a pass over row blocks holds
    neither a float64 copy of ``p`` nor the logs. Indexing with a slice that names a step
    (``z[::step]``) gives such a view of those rows; any other index gives their logs as an array,
    and a numpy function given the whole view (``np.asarray``) gets all of them."""

    def __init__(self, probabilities: np.ndarray):
        self.probabilities = probabilities
        self.shape = probabilities.shape
        self.ndim = probabilities.ndim
        self.dtype = np.dtype(np.float64)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index):
        if isinstance(index, slice) and index.step is not None:
            return FlooredLogProbabilities(self.probabilities[index])
        return np.log(np.clip(np.asarray(self.probabilities[index], dtype=np.float64), min=PROBABILITY_FLOOR))

    def __array__(self, dtype=None, copy=None):
        logs = self[:]
        return logs if dtype is None else logs.astype(dtype)


class ShiftedLogits:
    """Logits ``z`` (float64, float32 widened a block at a time, or the logs of probabilities
    taken a block at a time: ``FlooredLogProbabilities``) with their row maxima, so
    that ``d = z - max_j z`` is available block by block, and row sums over ``exp(beta * d)`` and
    its moments.

    ``d`` is never materialised: each block of rows, small enough to stay in cache, is shifted
    into a reusable buffer when needed, and the row sums are BLAS products of the block's vectors
    (``row_dots.row_products``), so one evaluation of the moments costs about half of one
    max-shifted softmax pass.
    """

    def __init__(self, logits: np.ndarray | FlooredLogProbabilities, labels: np.ndarray):
        self.z = logits
        self.n, self.k = logits.shape
        self.rows = max(1, CHUNK_ELEMENTS // self.k)
        self.top = np.empty(self.n)
        self.mean_d = np.empty(self.n)
        self.deep = False  # an entry of d below SCOUT_D_FLOOR: float32 passes floor d (blocks)
        for start in range(0, self.n, self.rows):
            block = logits[start:start + self.rows]
            rows = slice(start, start + len(block))
            self.top[rows] = block.max(axis=1)
            self.mean_d[rows] = row_sums(block) / self.k - self.top[rows]
            self.deep = self.deep or bool(np.any(block.min(axis=1) - self.top[rows] < SCOUT_D_FLOOR))
        self.labels = labels
        self.d_label = logits[np.arange(self.n), labels] - self.top
        self.last_objective = float("nan")

    def subsample(self, rows: int) -> ShiftedLogits:
        step = max(1, self.n // rows)
        sub = object.__new__(ShiftedLogits)
        sub.__dict__.update(self.__dict__)
        sub.z, sub.labels, sub.d_label = self.z[::step], self.labels[::step], self.d_label[::step]
        sub.top, sub.mean_d = self.top[::step], self.mean_d[::step]
        sub.n = sub.z.shape[0]
        return sub

    def blocks(self, rows: int | None = None, out: np.ndarray | None = None):
        """``(rows, d_block)`` over all rows, ``rows`` (default ``self.rows``) at a time;
        ``d_block`` is a reused buffer: float64 of ``rows x k``, or ``out[:, :k]`` (``out`` of
        ``rows`` rows of at least ``k`` columns; its further columns are left as they are). A
        float32 ``out`` (the passes that only scout) gets float32 logits minus their row maxima
        (correctly rounded), or float64 ``d`` rounded once (a float32 maximum of float64 logits
        would shift the row by up to 6e-8 of it), either kept at or above ``SCOUT_D_FLOOR`` where
        the logits reach below it (``deep``)."""
        step = rows or self.rows
        buffer = np.empty((step, self.k)) if out is None else out[:step, : self.k]
        for start in range(0, self.n, step):
            block = self.z[start:start + step]
            d = buffer[: len(block)]
            top = self.top[start:start + len(block), None]
            in_float64 = d.dtype == np.float64 or block.dtype == np.float64  # then rounded once into d
            np.subtract(block, top if in_float64 else top.astype(d.dtype), out=d, casting="unsafe")
            if self.deep and d.dtype != np.float64:
                np.maximum(d, SCOUT_D_FLOOR, out=d)
            yield slice(start, start + len(block)), d

    def d_rows(self, rows: np.ndarray) -> np.ndarray:
        return self.z[rows] - self.top[rows, None]

    def moments(self, beta: float, order: int, scout: bool = False) -> list[np.ndarray]:
        """``[sum e, sum e d, sum e d^2, sum e d^3][:order + 1]`` per row, ``e = exp(beta d)``: the
        products of ``1`` and ``d`` with ``e``, ``e d`` and ``e d^2`` (``MOMENTS``), BLAS products
        of the rows of a block (``row_dots.row_products``, rows of ``padded_width`` zero past
        ``k``). With ``scout``, in float32 (``d`` floored as ``blocks`` says), for the steps of a
        solve that a float64 evaluation ends (``solvers.increasing_root``)."""
        dtype = np.float32 if scout else np.float64
        k, (lefts, rights) = self.k, MOMENT_VECTORS[order]
        pairs = MOMENTS[order]
        stack = np.zeros((2 + rights, self.rows, padded_width(k, dtype)), dtype)  # 1, d, e, e d, e d^2
        stack[0, :, :k] = 1.0
        sums = np.empty((self.n, len(pairs)))
        with np.errstate(over="ignore") if scout else contextlib.nullcontext():
            for rows, d in self.blocks(out=stack[1]):
                e = stack[2, : len(d), :k]
                np.exp(np.multiply(d, beta, out=e), out=e)
                for j in range(1, rights):  # e d, e d^2
                    np.multiply(stack[1 + j, : len(d), :k], d, out=stack[2 + j, : len(d), :k])
                row_products(stack[:lefts, : len(d)], stack[2:, : len(d)], pairs, out=sums[rows], ones=(0, None))
        return list(np.ascontiguousarray(sums.T))

    def exp_sums(self, betas: tuple[float, ...]) -> list[np.ndarray]:
        """``sum_j exp(beta d_j)`` per row for each ``beta``, in one pass over the row blocks."""
        out = [np.empty(self.n) for _ in betas]
        e = np.empty((self.rows, self.k))
        for rows, d in self.blocks():
            weights = e[: len(d)]
            for beta, sums in zip(betas, out, strict=True):
                np.multiply(d, beta, out=weights)
                np.exp(weights, out=weights)
                row_sums(weights, sums[rows])
        return out

    def count_top_ties(self) -> np.ndarray:
        """How many entries of each row equal its maximum."""
        ties = np.empty(self.n, dtype=np.int64)
        for rows, d in self.blocks():
            ties[rows] = np.count_nonzero(d == 0, axis=1)
        return ties

    def nll_gradient(self, beta: float, scout: bool = False) -> tuple[float, float, float]:
        """First, second and third derivative of the mean NLL in ``beta = 1/T``: the means of
        the first three cumulants of ``d`` under ``softmax(beta d)`` (``d_y`` subtracted from
        the first). The NLL itself is kept in ``last_objective``. ``scout``: ``moments``'."""
        s0, s1, s2, s3 = self.moments(beta, 3, scout)
        m1, m2, m3 = s1 / s0, s2 / s0, s3 / s0
        self.last_objective = float(np.mean(np.log(s0) - beta * self.d_label))
        return (float(np.mean(m1 - self.d_label)), float(np.mean(m2 - m1**2)),
                float(np.mean(m3 - 3 * m1 * m2 + 2 * m1**3)))


class DeviceShiftedLogits(ShiftedLogits):
    """``ShiftedLogits`` of an array on an Array API device (torch on a GPU, ...): ``d`` is kept
    there in float64, the row sums of ``exp(beta d) d^j`` are computed there, and only vectors of
    n row values come to the host, where the solvers run. On a GPU each sum is one pass over the
    whole array; in host memory the rows go in blocks of ``CHUNK_ELEMENTS`` entries, so that the
    temporaries stay in cache instead of being allocated (and faulted in) at full size."""

    def __init__(self, logits, labels: np.ndarray):
        xp = self.xp = namespace(logits)
        self.n, self.k = logits.shape
        self.z = logits
        self.d = logits - xp.max(logits, axis=1, keepdims=True)
        self.labels = labels
        self.d_label = to_host(label_entries(self.d, labels))
        self.mean_d = to_host(xp.mean(self.d, axis=1))
        self.last_objective = float("nan")
        self.rows = max(1, CHUNK_ELEMENTS // self.k) if on_cpu(logits) else self.n

    def subsample(self, rows: int) -> DeviceShiftedLogits:
        step = max(1, self.n // rows)
        return DeviceShiftedLogits(self.z[::step, :], self.labels[::step])

    def moments(self, beta: float, order: int, scout: bool = False) -> list[np.ndarray]:
        """As on the host, always in float64 (a device's passes cost too little to scout)."""
        xp, beta = self.xp, float(beta)
        parts: list[list] = [[] for _ in range(order + 1)]  # per degree, the row sums of each block
        for start in range(0, self.n, self.rows):
            d = self.d[start:min(start + self.rows, self.n), :]
            term = xp.exp(d * beta)
            parts[0].append(xp.sum(term, axis=1))
            for degree in range(1, order + 1):
                term *= d
                parts[degree].append(xp.sum(term, axis=1))
        return [to_host(xp.concat(sums) if len(sums) > 1 else sums[0]) for sums in parts]

    def exp_sums(self, betas: tuple[float, ...]) -> list[np.ndarray]:
        return [self.moments(beta, 0)[0] for beta in betas]

    def count_top_ties(self) -> np.ndarray:
        return to_host(self.xp.sum(self.xp.astype(self.d == 0, self.xp.int64), axis=1))

    def brier_and_slope(self, beta: float) -> tuple[float, float]:
        """``_brier_and_slope`` with the O(n k) work on the device."""
        xp, d = self.xp, self.d
        p = softmax(d * float(beta))
        mean_d = xp.sum(p * d, axis=1)
        p_y = label_entries(p, self.labels)
        sq = xp.sum(p * p, axis=1)
        d_sq = 2 * (xp.sum(p * p * d, axis=1) - sq * mean_d)
        d_py = p_y * (xp.asarray(self.d_label, device=device(d)) - mean_d)
        return float(xp.mean(sq - 2 * p_y + 1)), float(xp.mean(d_sq - 2 * d_py))


def shifted_logits(scores: InputBatch, labels: np.ndarray) -> ShiftedLogits:
    """The shifted logits of a batch, on its device when it has one; on the host, probabilities'
    logits are taken a block at a time (``FlooredLogProbabilities``) unless the batch holds them."""
    if scores.xp is np:
        if scores.source == "logits":
            return ShiftedLogits(scores.given, labels)
        if "logits" in scores.__dict__:
            return ShiftedLogits(scores.logits, labels)
        return ShiftedLogits(FlooredLogProbabilities(scores.given), labels)
    return DeviceShiftedLogits(scores.logits, labels)
