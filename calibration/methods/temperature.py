"""Temperature scaling (Guo et al., "On Calibration of Modern Neural Networks", ICML 2017).

``p = softmax(z / T)`` with one temperature ``T > 0`` chosen on a validation set:

* ``objective="nll"`` (default): ``T`` minimises the mean negative log-likelihood. Writing
  ``beta = 1/T`` and ``d = z - max(z)``, ``NLL(beta) = mean(log sum_j exp(beta d_j) - beta d_y)``
  is convex in ``beta`` with ``NLL' = mean(E_p[d] - d_y)`` and ``NLL'' = mean(Var_p[d]) >= 0``, so
  the optimum is the unique root of ``NLL'``, found by safeguarded Halley iteration (the
  third derivative is the mean third cumulant of ``d`` under ``p``) on a bracket
  ``T in [1e-6, 1e6]`` to a relative step of eps^(1/3), after which the error is of order eps
  (on the host, without a warm start, the steps down to 1e-2 are taken on float32 passes,
  ``solvers.increasing_root``'s scout; the last is float64). An optimum exists iff
  ``NLL'(0) < 0 < NLL'(inf)``; otherwise, or if it lies outside the bracket, the fit raises
  ``ValueError`` saying which way it runs.
* ``objective="brier"``: ``T`` minimises the mean squared error ``mean ||p - y||^2`` (as
  Mix-n-Match fits it); not convex, so a log-spaced grid over ``[T_nll/10, 10 T_nll]`` (moved
  outwards while its minimum sits on an edge) finds the basin and Brent's method finds the
  root of the analytic derivative in it.
* ``objective="ece"``: ``T`` minimises the 15-bin top-label ECE on the validation set; ECE is
  piecewise constant in ``T``, so the minimum of the same grid is refined by bounded Brent
  search.

Accuracy-preserving: dividing by ``T > 0`` keeps the order of every row.

Backends (``calibration.backend``): prediction runs on the input's device. With the NLL
objective the fit keeps its Halley solver on the host and computes the per-row sums of
``exp(beta d) d^j`` on the device (``shifted_logits.DeviceShiftedLogits``); the Brier objective
does the same with its loss and slope; the ECE objective fits on a host copy.

The three temperature solvers work on ``shifted_logits.ShiftedLogits`` (the shifted-logit sums,
host and device); expectation consistency, ensemble and class temperatures reuse them.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from ..base import Calibrator, FitDiagnostics, param_float
from ..inputs import InputBatch
from ..metrics.binned import validated_ece
from ..options import INPUT_OPTION, Option
from ..probability_floor import EPSILON, floor_counts_of_uncleared
from ..softmax import scaled_softmax_as, softmax
from ..solvers import increasing_root
from .shifted_logits import DeviceShiftedLogits, ShiftedLogits, shifted_logits

BETA_LIMITS = (1e-6, 1e6)
GRID_FACTORS = np.logspace(-1, 1, 21)  # the grid of the non-convex objectives, around T_nll
WARM_START_ROWS = 4096


def solve_nll_temperature(shifted: ShiftedLogits) -> tuple[float, FitDiagnostics]:
    """The NLL-optimal temperature (see the module docstring)."""
    at_zero = float(np.mean(shifted.mean_d - shifted.d_label))
    if not at_zero < 0:
        raise ValueError(
            "temperature scaling has no finite optimum: the NLL keeps falling as T grows "
            "(the logits carry no information about the labels, or point away from them)"
        )
    if not np.any(shifted.d_label < 0):
        raise ValueError(
            "temperature scaling has no finite optimum: every label is a top-scoring class, "
            "so the NLL keeps falling as T shrinks to 0"
        )
    beta0 = 1.0
    scout = None if isinstance(shifted, DeviceShiftedLogits) else partial(shifted.nll_gradient, scout=True)
    if shifted.n > 4 * WARM_START_ROWS:
        warm = shifted.subsample(WARM_START_ROWS)
        if np.any(warm.d_label < 0):  # a warm start to 1e-3 from float32 passes (their error is ~1e-6)
            guess = increasing_root(partial(warm.nll_gradient, scout=True), 1.0, *BETA_LIMITS, rtol=1e-3)
            if guess.converged:  # from there two float64 passes end the solve: nothing to scout
                beta0, scout = guess.x, None
    root = increasing_root(shifted.nll_gradient, beta0, *BETA_LIMITS, scout=scout)
    if "lies" in root.message:
        raise ValueError(f"the NLL-optimal temperature is outside [1e-6, 1e6] (for the inverse "
                         f"temperature, {root.message}): the logits are degenerate or extreme")
    return 1.0 / root.x, FitDiagnostics(
        converged=root.converged,
        iterations=root.iterations,
        message=root.message,
        gradient_norm=abs(root.value),
        objective=shifted.last_objective,
    )


def _brier_and_slope(shifted: ShiftedLogits, beta: float) -> tuple[float, float]:
    """Mean squared error of ``softmax(beta d)`` and its derivative in ``beta``."""
    if isinstance(shifted, DeviceShiftedLogits):
        return shifted.brier_and_slope(beta)
    loss = slope = 0.0
    for rows, d in shifted.blocks():
        p = softmax(d * beta)
        mean_d = np.einsum("ij,ij->i", p, d)
        p_y = p[np.arange(len(d)), shifted.labels[rows]]
        sq = np.einsum("ij,ij->i", p, p)
        loss += float(np.sum(sq - 2 * p_y + 1))
        d_sq = 2 * (np.einsum("ij,ij,ij->i", p, p, d) - sq * mean_d)
        d_py = p_y * (shifted.d_label[rows] - mean_d)
        slope += float(np.sum(d_sq - 2 * d_py))
    return loss / shifted.n, slope / shifted.n


def grid_minimum(objective, centre: float) -> tuple[np.ndarray, np.ndarray, int]:
    """A log-spaced grid of temperatures around ``centre`` whose minimum is interior: the grid
    ``centre * GRID_FACTORS`` moves outwards (up to T in [1e-6, 1e6]) while its minimum is on an
    edge. Returns the grid, the objective on it and the index of the minimum."""
    grid = centre * GRID_FACTORS
    values = np.array([objective(t) for t in grid])
    while True:
        best = int(np.argmin(values))
        if 0 < best < len(grid) - 1:
            return grid, values, best
        step = grid[1] / grid[0]
        new = grid[0] / step if best == 0 else grid[-1] * step
        if not 1e-6 <= new <= 1e6:
            side = "below" if best == 0 else "above"
            raise ValueError(f"the optimal temperature lies {side} the searched range [1e-6, 1e6]")
        value = objective(new)
        grid = np.insert(grid, 0, new) if best == 0 else np.append(grid, new)
        values = np.insert(values, 0, value) if best == 0 else np.append(values, value)


def solve_brier_temperature(shifted: ShiftedLogits) -> tuple[float, FitDiagnostics]:
    from scipy.optimize import brentq  # imported on use: scipy.optimize would slow every start

    centre, _ = solve_nll_temperature(shifted)
    grid, _, best = grid_minimum(lambda t: _brier_and_slope(shifted, 1.0 / t)[0], centre)
    betas = 1.0 / grid
    lo, hi = sorted((betas[best - 1], betas[best + 1]))
    slope_lo, slope_hi = (_brier_and_slope(shifted, b)[1] for b in (lo, hi))
    evaluations = len(betas) + 2
    if slope_lo < 0 < slope_hi:
        beta, result = brentq(lambda b: _brier_and_slope(shifted, b)[1], lo, hi,
                              xtol=1e-300, rtol=4 * np.finfo(float).eps, full_output=True)
        converged, iterations, message = result.converged, evaluations + result.function_calls, result.flag
    else:
        beta, converged, iterations = betas[best], False, evaluations
        message = "the derivative does not change sign around the grid minimum"
    loss, slope = _brier_and_slope(shifted, beta)
    return 1.0 / beta, FitDiagnostics(converged, iterations, message, abs(slope), loss)


def solve_ece_temperature(scores: InputBatch, labels: np.ndarray) -> tuple[float, FitDiagnostics]:
    from scipy.optimize import minimize_scalar

    def objective(log_t: float) -> float:
        return validated_ece(softmax(scores.logits / math.exp(log_t)), labels)

    centre, _ = solve_nll_temperature(ShiftedLogits(scores.logits, labels))
    grid, values, best = grid_minimum(lambda t: objective(math.log(t)), centre)
    log_grid = np.log(grid)
    lo, hi = log_grid[best - 1], log_grid[best + 1]
    result = minimize_scalar(objective, bounds=(lo, hi), method="bounded",
                             options={"xatol": 1e-10})
    log_t, value = (result.x, result.fun) if result.fun <= values[best] else (log_grid[best], values[best])
    return math.exp(log_t), FitDiagnostics(
        converged=bool(result.success),
        iterations=len(log_grid) + int(result.nfev),
        message="grid search refined by bounded Brent (ECE is piecewise constant in T)",
        objective=float(value),
    )


class TemperatureCalibrator(Calibrator):
    """Shared model of the methods that divide logits by one temperature ``temperature_``."""

    accuracy_preserving = True

    def _predict(self, scores: InputBatch) -> np.ndarray:
        if scores.source == "logits" and scores.xp is np and "logits" not in scores.__dict__:
            # float32 logits not yet widened: widened and divided in one pass (the same numbers)
            return softmax(np.divide(scores.given, self.temperature_, dtype=np.float64), overwrite=True)
        return softmax(scores.logits / self.temperature_, overwrite=True)

    def _predict_as(self, scores: InputBatch, dtype) -> tuple[np.ndarray, bool]:
        if scores.source == "logits" and scores.xp is np and scores.given.dtype.kind == "f":
            return scaled_softmax_as(scores.given, self.temperature_, dtype, EPSILON, scores.row_range)
        return self._predict(scores), False

    def _floor_counts(self, scores: InputBatch, labels: np.ndarray) -> tuple[int, int]:
        """The base class's counts, predicting only the rows that ``rows_not_cleared``'s bound
        does not clear."""
        return floor_counts_of_uncleared(super()._floor_counts, scores, labels, [(1.0, self.temperature_)], 0.0)

    def _params(self) -> dict:
        return {"temperature": self.temperature_}

    def _set_params(self, params: dict) -> None:
        self.temperature_ = param_float(params, "temperature", positive=True)


class TemperatureScaling(TemperatureCalibrator):
    """Temperature scaling, ``softmax(z / T)`` (Guo et al. 2017); see the module docstring."""

    method = "temperature"
    description = "Temperature scaling (Guo et al. 2017): softmax(z / T), one T for all classes."
    options_spec = (
        INPUT_OPTION,
        Option("objective", str, "nll", "Validation loss that T minimises.",
               choices=("nll", "brier", "ece")),
    )

    def _fit(self, scores: InputBatch, labels: np.ndarray) -> FitDiagnostics:
        objective = self.options["objective"]
        if objective == "ece":
            self.temperature_, diagnostics = solve_ece_temperature(scores, labels)
            return diagnostics
        shifted = shifted_logits(scores, labels)
        solve = solve_nll_temperature if objective == "nll" else solve_brier_temperature
        self.temperature_, diagnostics = solve(shifted)
        return diagnostics

    def fits_on_device(self) -> bool:
        return self.options["objective"] == "nll"

