"""Expectation consistency (Clarté, Loureiro, Krzakala, Zdeborová, "Expectation consistent
calibration of classifiers", 2023).

``p = softmax(z / T)`` with ``T`` chosen so that on the validation set the mean top-N
confidence equals the top-N accuracy:

    mean_i sum_{j in top-N(i)} softmax(z_i / T)_j  =  mean_i [rank_i(y_i) < N]

(N = 1 is the paper's method: mean max-probability = accuracy). Ranks order logits from the
highest, ties broken by the lower class index. The mean top-N confidence increases with
``beta = 1/T`` from ``N/k`` (T = inf) to its T -> 0 limit, so a solution exists iff the
top-N accuracy lies strictly between those two; otherwise ``fit`` raises ``ValueError``.
The root is found by safeguarded Halley iteration in ``beta`` with analytic derivatives.
Accuracy-preserving, as temperature scaling.

Cost: on the host the top-N hits and top ties come from one pass over row
blocks (``top_n_hits_and_top_ties``), then a Halley solve warm-started on a subsample takes two
row-sum passes over all rows; without a warm start (at most 16384 rows) its steps down to 1e-2
are taken on float32 passes (``solvers.increasing_root``'s scout; figures in docs/benchmarks.md).

Backends: prediction on the input's device; the fit keeps its solver on the host and computes
the row sums (and the label ranks and top-N entries) on the device.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ..backend import to_host
from ..base import FitDiagnostics
from ..inputs import InputBatch
from ..metrics.scores import label_ranks
from ..options import INPUT_OPTION, Option
from ..solvers import increasing_root
from .shifted_logits import DeviceShiftedLogits, ShiftedLogits, shifted_logits
from .temperature import BETA_LIMITS, WARM_START_ROWS, TemperatureCalibrator


def top_n_hits_and_top_ties(shifted: ShiftedLogits, top_n: int) -> tuple[np.ndarray, np.ndarray]:
    """Whether each label ranks among its row's ``top_n`` (``metrics.scores.label_ranks``: ties
    to the lower class index) and each row's count of entries equal to its maximum; on the host
    in one pass over row blocks (no n x k temporaries), on a device as before. For N = 1 the
    label ranks first iff it is the row's first maximum, its argmax."""
    if isinstance(shifted, DeviceShiftedLogits):
        return label_ranks(shifted.z, shifted.labels) < top_n, shifted.count_top_ties()
    z, labels, n = shifted.z, shifted.labels, shifted.n
    at_label = z[np.arange(n), labels]
    hits, ties = np.empty(n, dtype=bool), np.empty(n, dtype=np.int64)
    columns = np.arange(shifted.k)
    step = 4 * shifted.rows
    at_top = np.empty((step, shifted.k), dtype=bool)
    for start in range(0, n, step):
        rows = slice(start, min(start + step, n))
        block, equal = z[rows], at_top[: min(step, n - start)]
        np.equal(block, shifted.top[rows, None], out=equal)
        ties[rows] = equal.sum(axis=1)
        if top_n == 1:
            hits[rows] = equal.argmax(axis=1) == labels[rows]
        else:
            z_y = at_label[rows, None]
            ahead = np.count_nonzero(block > z_y, axis=1)
            ahead += np.count_nonzero((block == z_y) & (columns < labels[rows, None]), axis=1)
            hits[rows] = ahead < top_n
    return hits, ties


class _TopConfidence:
    """Mean top-N confidence of ``softmax(beta d)`` minus the top-N accuracy, with its slope."""

    def __init__(self, shifted: ShiftedLogits, top_n: int, target: float):
        self.shifted, self.target = shifted, target
        # the N largest entries of each row of d (their order does not matter)
        z, k = shifted.z, shifted.k
        if top_n == 1:
            self.top = None
        elif isinstance(shifted, DeviceShiftedLogits):
            self.top = to_host(shifted.xp.sort(shifted.d, axis=1)[:, k - top_n:])
        else:
            self.top = np.partition(z, k - top_n, axis=1)[:, k - top_n:] - shifted.top[:, None]

    def __call__(self, beta: float, scout: bool = False) -> tuple[float, float, float]:
        """The gap and its first two derivatives in ``beta``. With ``s_j = sum e d^j`` over the
        row and ``a_j`` the same over its top N entries, the top-N confidence is ``c = a_0/s_0``,
        ``c' = (a_1 - c s_1)/s_0`` and ``c" = (a_2 - c s_2 - 2 c' s_1)/s_0``. ``scout``: the
        row sums in float32 (``ShiftedLogits.moments``)."""
        s0, s1, s2 = self.shifted.moments(beta, 2, scout)
        if self.top is None:  # the top entry of d is 0: a_0 = 1, a_1 = a_2 = 0
            c = 1.0 / s0
            c1 = -c * s1 / s0
            c2 = (-c * s2 - 2 * c1 * s1) / s0
        else:
            e = np.exp(self.top * beta)
            a0, a1, a2 = e.sum(axis=1), (e * self.top).sum(axis=1), (e * self.top**2).sum(axis=1)
            c = a0 / s0
            c1 = (a1 - c * s1) / s0
            c2 = (a2 - c * s2 - 2 * c1 * s1) / s0
        return float(np.mean(c)) - self.target, float(np.mean(c1)), float(np.mean(c2))

    def limit_at_zero_temperature(self, ties: np.ndarray | None = None) -> float:
        """The mean top-N confidence as T -> 0, from each row's count of top-scoring entries."""
        ties = self.shifted.count_top_ties() if ties is None else ties
        n_top = 1 if self.top is None else self.top.shape[1]
        return float(np.mean(np.minimum(n_top, ties) / ties))


class ExpectationConsistency(TemperatureCalibrator):
    """Expectation-consistent temperature (Clarté et al. 2023); see the module docstring."""

    method = "expectation_consistency"
    description = (
        "Expectation consistency (Clarté et al. 2023): the T at which mean top-N confidence "
        "equals top-N accuracy on the validation set."
    )
    options_spec = (
        INPUT_OPTION,
        Option("top_n", int, 1, "N: match mean top-N confidence to top-N accuracy.", minimum=1,
               maximum=10_000),
    )

    def _fit(self, scores: InputBatch, labels: np.ndarray) -> FitDiagnostics:
        top_n = self.options["top_n"]
        if top_n >= scores.k:
            raise ValueError(f"top_n must be below the number of classes ({scores.k}), got {top_n}")
        shifted = shifted_logits(scores, labels)
        hits, ties = top_n_hits_and_top_ties(shifted, top_n)
        accuracy = float(np.mean(hits))
        what = "accuracy" if top_n == 1 else f"top-{top_n} accuracy"
        gap = _TopConfidence(shifted, top_n, accuracy)
        if accuracy <= top_n / scores.k:
            raise ValueError(
                f"expectation consistency has no solution: the {what} {accuracy:.6g} is at most "
                f"{top_n}/{scores.k}, the confidence of uniform predictions (T = infinity)"
            )
        ceiling = gap.limit_at_zero_temperature(ties)
        if accuracy >= ceiling:
            raise ValueError(
                f"expectation consistency has no solution: the {what} {accuracy:.6g} is not below "
                f"{ceiling:.6g}, the highest mean confidence any temperature reaches (T -> 0)"
            )
        beta0 = 1.0
        scout = None if isinstance(shifted, DeviceShiftedLogits) else partial(gap, scout=True)
        if shifted.n > 4 * WARM_START_ROWS:
            warm_shifted = shifted.subsample(WARM_START_ROWS)
            warm = _TopConfidence(warm_shifted, top_n, accuracy)
            step = max(1, shifted.n // WARM_START_ROWS)  # as subsample takes its rows
            if top_n / scores.k < accuracy < warm.limit_at_zero_temperature(ties[::step]):
                guess = increasing_root(partial(warm, scout=True), 1.0, *BETA_LIMITS, rtol=1e-3)
                if guess.converged:  # from there two float64 passes end the solve: nothing to scout
                    beta0, scout = guess.x, None
        root = increasing_root(gap, beta0, *BETA_LIMITS, scout=scout)
        self.temperature_ = 1.0 / root.x
        return FitDiagnostics(
            converged=root.converged,
            iterations=root.iterations,
            message=root.message,
            gradient_norm=abs(root.value),
            objective=abs(root.value),
        )

    def fits_on_device(self) -> bool:
        return True

    def summary(self) -> dict:
        return {"temperature": self.temperature_, "top_n": self.options["top_n"]}

