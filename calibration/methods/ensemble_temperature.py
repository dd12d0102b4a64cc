"""Ensemble temperature scaling (Zhang, Kailkhura, Han, "Mix-n-Match: Ensemble and
Compositional Methods for Uncertainty Calibration in Deep Learning", ICML 2020, eq. 5).

    p = w1 * softmax(z / t) + w2 * softmax(z) + w3 * (1/k),   w on the simplex.

As in the paper's code, ``t`` is first fitted by temperature scaling with the same loss, then
the weights minimise that loss with ``t`` fixed:

* ``loss="mse"`` (the paper's default): the loss is quadratic in ``w``; the minimum over the
  simplex is found exactly by solving the KKT system on each of the 7 faces and keeping the
  best feasible point.
* ``loss="nll"``: ``f(w) = -mean log(w . v_i)`` with ``v_i`` the three components'
  probabilities of the label; convex. Writing ``w = (a, b, 1 - a - b)``, the partial minimum
  ``g(a) = min_b f(a, b)`` over ``b in [0, 1 - a]`` is convex too, with ``g'(a) = ∂f/∂a`` at
  the inner minimiser (envelope theorem); so the minimum is found by two nested bracketed
  roots (Brent) of increasing derivatives, ``∂f/∂b = -mean((v_2 - v_3)/q)`` inside and ``g'``
  outside, each ending at an end of its interval when the derivative does not change sign.
  Only signs and interpolation use the derivatives, so their scale does not matter: a row
  whose label probability is 5e-24 (a gradient of 1e19 at the vertex ``(1, 0, 0)``) does not
  stop the fit as it stopped SLSQP started there.

Accuracy-preserving: each component keeps the order of each row.

Cost: on the host nothing of size n x k is formed besides the float64
logits. With mse, ``t`` comes from ``brier_temperature`` (Halley's method with analytic
derivatives on all rows from a subsample's grid minimum, for more than 16384 rows; the grid
of ``temperature.solve_brier_temperature`` otherwise), whose last pass also gives the 3 x 3
Gram matrix and the linear term; with nll, the label entries of the components come from one
blocked row-sum pass each (figures: ``benchmarks/core_speed.py``, docs/benchmarks.md).
Prediction on the host goes in row blocks into the output, so the two components and their
weighted sums are never five n x k arrays.

Backends: prediction on the input's device; the temperature is fitted as in temperature
scaling (sums on the device, solver on the host), the label entries and Gram sums of the
three components are reduced on the device, and the 3-weight problem is solved on the host.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..backend import label_entries, namespace, row_dot, to_host
from ..base import Calibrator, FitDiagnostics, param_array, param_float
from ..inputs import InputBatch
from ..metrics.validated import row_blocks
from ..options import INPUT_OPTION, Option
from ..probability_floor import EPSILON, floor_counts_of_uncleared
from ..softmax import softmax
from .brier_temperature import BrierSums, fit_brier_temperature
from .shifted_logits import ShiftedLogits, shifted_logits
from .temperature import solve_nll_temperature

COMPONENTS = ("temperature_scaled", "identity", "uniform")
EPS = float(np.finfo(np.float64).eps)  # the float64 resolution of the weight solves


def label_probabilities(shifted: ShiftedLogits, beta: float) -> list[np.ndarray]:
    """Label entries of ``softmax(beta d)`` and ``softmax(d)``, from one pass over the row blocks."""
    sums = shifted.exp_sums((beta, 1.0))
    return [np.exp(b * shifted.d_label) / s0 for b, s0 in zip((beta, 1.0), sums, strict=True)]


def simplex_quadratic_minimum(gram: np.ndarray, linear: np.ndarray) -> np.ndarray:
    """argmin over the simplex of ``w' G w - 2 h' w`` (G positive semi-definite), exactly."""
    m = len(linear)
    best: np.ndarray | None = None
    best_value = np.inf
    for size in range(1, m + 1):
        for support in itertools.combinations(range(m), size):
            idx = list(support)
            kkt = np.zeros((size + 1, size + 1))
            kkt[:size, :size] = 2 * gram[np.ix_(idx, idx)]
            kkt[:size, size] = kkt[size, :size] = 1.0
            rhs = np.append(2 * linear[idx], 1.0)
            solution, *_ = np.linalg.lstsq(kkt, rhs, rcond=None)
            w = np.zeros(m)
            w[idx] = solution[:size]
            if np.any(w < -1e-12) or abs(w.sum() - 1) > 1e-9:
                continue
            w = np.clip(w, 0, None)
            w /= w.sum()
            value = w @ gram @ w - 2 * linear @ w
            if value < best_value - 1e-15:
                best, best_value = w, value
    if best is None:  # every vertex is feasible: only a non-finite G or h leaves no value below inf
        raise ValueError("the simplex quadratic has no finite value (its Gram matrix or linear term is not finite)")
    return best


def _increasing_root(g, lo: float, hi: float) -> float:
    """The point of ``[lo, hi]`` where the increasing ``g`` changes sign (an end if it does not);
    Brent's method with ±inf (a zero probability at an end) replaced by ±1e300 for the
    interpolation only."""
    g_lo, g_hi = g(lo), g(hi)
    if hi <= lo or g_lo >= 0:
        return lo
    if g_hi <= 0:
        return hi
    from scipy.optimize import brentq  # imported on use: scipy.optimize would slow every start

    return brentq(lambda t: float(np.clip(g(t), -1e300, 1e300)), lo, hi, xtol=1e-300, rtol=4 * EPS,
                  maxiter=500)


def simplex_log_loss_minimum(v: np.ndarray) -> tuple[np.ndarray, float, int]:
    """argmin over the simplex of ``f(w) = -mean log(v w)`` for three components (see the
    module docstring): the weights, the loss and the number of loss-gradient evaluations."""
    calls = [0]

    def partials(a: float, b: float) -> tuple[float, float]:
        """``∂f/∂a`` and ``∂f/∂b`` for ``w = (a, b, 1 - a - b)``."""
        calls[0] += 1
        q = a * v[:, 0] + b * v[:, 1] + max(0.0, 1.0 - a - b) * v[:, 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            return float(-np.mean((v[:, 0] - v[:, 2]) / q)), float(-np.mean((v[:, 1] - v[:, 2]) / q))

    def inner(a: float) -> float:
        return _increasing_root(lambda b: partials(a, b)[1], 0.0, 1.0 - a)

    def outer_slope(a: float) -> float:
        """Derivative of ``min_b f(a, b)`` (envelope theorem; along the edge b = 1 - a when the
        inner minimum is there)."""
        b = inner(a)
        f_a, f_b = partials(a, b)
        return f_a - f_b if b > 0 and b >= 1.0 - a else f_a

    a = _increasing_root(outer_slope, 0.0, 1.0)
    b = inner(a)
    w = np.array([a, b, max(0.0, 1.0 - a - b)])
    w /= w.sum()
    with np.errstate(divide="ignore"):
        return w, float(-np.mean(np.log(v @ w))), calls[0]


class EnsembleTemperatureScaling(Calibrator):
    """Ensemble temperature scaling (Mix-n-Match eq. 5); see the module docstring."""

    method = "ensemble_temperature"
    description = (
        "Ensemble temperature scaling (Zhang et al. 2020): w1*softmax(z/t) + w2*softmax(z) + "
        "w3/k with weights on the simplex."
    )
    options_spec = (
        INPUT_OPTION,
        Option("loss", str, "mse", "Loss fitted for t and then for the weights.",
               choices=("mse", "nll")),
    )
    accuracy_preserving = True

    def fits_on_device(self) -> bool:
        return True

    def _components(self, scores: InputBatch) -> tuple[np.ndarray, np.ndarray]:
        return softmax(scores.logits / self.temperature_), scores.probabilities

    def _fit(self, scores: InputBatch, labels: np.ndarray) -> FitDiagnostics:
        shifted = shifted_logits(scores, labels)
        mse = self.options["loss"] == "mse"
        on_host = scores.xp is np
        if mse:
            self.temperature_, t_diagnostics, newton = fit_brier_temperature(shifted)
        else:
            self.temperature_, t_diagnostics = solve_nll_temperature(shifted)
        k = scores.k
        if mse:
            if on_host:  # blocked sums (brier_temperature), no n x k component is formed
                sums, delta = newton or (BrierSums(shifted, 1.0 / self.temperature_, quadratic=True), 0.0)
                gram, linear = sums.quadratic(delta)
            else:
                gram, linear = self._device_quadratic(scores, labels)
            self.weights_ = simplex_quadratic_minimum(gram, linear)
            objective = float(self.weights_ @ gram @ self.weights_ - 2 * linear @ self.weights_ + 1)
            converged, message, iterations = True, "exact minimum over the simplex", 1
        else:
            at_label = label_probabilities(shifted, 1.0 / self.temperature_) if on_host else \
                [to_host(label_entries(a, labels)) for a in self._components(scores)]
            v = np.column_stack([*at_label, np.full(scores.n, 1.0 / k)])
            self.weights_, objective, iterations = simplex_log_loss_minimum(v)
            converged = bool(np.isfinite(objective))
            message = "minimum over the simplex (nested bracketed roots of the derivatives)"
        return FitDiagnostics(
            converged=t_diagnostics.converged and converged,
            iterations=t_diagnostics.iterations + iterations,
            message=f"temperature: {t_diagnostics.message}; weights: {message}",
            objective=objective,
        )

    def _device_quadratic(self, scores: InputBatch, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(G, h)`` of the mse weight problem from the components formed on the device."""
        comps = self._components(scores)
        k = scores.k
        gram = np.full((3, 3), 1.0 / k)
        for i, j in itertools.product(range(2), repeat=2):
            gram[i, j] = float(namespace(comps[0]).mean(row_dot(comps[i], comps[j])))
        linear = np.array([*(float(to_host(label_entries(a, labels)).mean()) for a in comps), 1.0 / k])
        return gram, linear

    def _predict(self, scores: InputBatch) -> np.ndarray:
        w1, w2, w3 = (float(w) for w in self.weights_)
        if scores.xp is not np:
            scaled, identity = self._components(scores)
            return w1 * scaled + w2 * identity + w3 / scores.k
        out = np.empty((scores.n, scores.k))
        for rows in row_blocks(scores.n, scores.k):  # row by row the arithmetic of the device path
            block, logits = out[rows], scores.logit_rows(rows)  # float32 input widened a block at a time
            block[...] = softmax(logits / self.temperature_, overwrite=True)
            block *= w1
            block += w2 * (softmax(logits) if scores.source == "logits" else scores.probability_rows(rows))
            block += w3 / scores.k
        return out

    def _floor_counts(self, scores: InputBatch, labels: np.ndarray) -> tuple[int, int]:
        """The base class's counts, predicting only the rows that ``rows_not_cleared``'s bound does
        not clear (none where ``w3 / k >= EPSILON``: every entry is at least ``w3 / k``)."""
        w1, w2, w3 = (float(w) for w in self.weights_)
        if w3 / scores.k >= EPSILON:
            return 0, 0
        return floor_counts_of_uncleared(super()._floor_counts, scores, labels,
                                         [(w1, self.temperature_), (w2, 1.0)], w3)

    def _params(self) -> dict:
        return {"temperature": self.temperature_, "weights": self.weights_.tolist()}

    def _set_params(self, params: dict) -> None:
        self.temperature_ = param_float(params, "temperature", positive=True)
        weights = param_array(params, "weights", (3,))
        if np.any(weights < 0) or abs(weights.sum() - 1) > 1e-12:
            raise ValueError("stored ETS weights must lie on the simplex")
        self.weights_ = weights

    def summary(self) -> dict:
        return {"temperature": self.temperature_,
                "weights": dict(zip(COMPONENTS, self.weights_.tolist(), strict=True))}
