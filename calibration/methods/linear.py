"""Affine maps of logit-like features followed by a softmax, fitted by penalised NLL.

* ``vector`` — vector scaling (Guo et al. 2017): ``softmax(w ⊙ z + b)``.
* ``matrix`` — matrix scaling (Guo et al. 2017): ``softmax(W z + b)``.
* ``dirichlet`` — Dirichlet calibration (Kull et al., "Beyond temperature scaling", NeurIPS
  2019): ``softmax(W ln q + b)`` with ``ln q = log_softmax(z)`` the log-probabilities.

Matrix and Dirichlet take the ODIR penalty of Kull et al., added to the mean NLL:
``λ/(k(k-1)) Σ_{i≠j} W_ij² + μ/k Σ_j b_j²`` (options ``off_diagonal_l2`` = λ and
``bias_l2`` = μ; both 0 by default, the unregularised fit). Each objective is convex; it is
minimised from the identity map by L-BFGS-B with its analytic gradient
``∂/∂W = (P - Y)ᵀ X / n + penalty``, ``∂/∂b = mean(P - Y) + penalty``, taken in standardised
feature coordinates (same optimum, far better conditioned), and the fit reports convergence
when the gradient's largest entry (in those coordinates) is below 1e-6. Without regularisation the
optimum may not exist (separable data); the fit then reports that it did not converge.

Dirichlet calibration also exposes its canonical parameters (Kull et al. §3): the matrix
``A = W - min over each column`` and the calibrated probabilities of a uniform input,
``c = softmax(W ln u + b)`` with ``u = (1/k, ..., 1/k)``.

Backends: prediction (an affine map and a softmax) runs on the input's device; the fit runs
on a float64 host copy. Its iterative solvers stop at a gradient tolerance, so the same loss
summed in another order (on another device) stops them elsewhere within it: fitted on a torch
copy, Dirichlet predictions moved by 1.5e-4 on CIFAR-10. On the host every backend gets
bit-identical parameters.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..base import Calibrator, FitDiagnostics, on_device, param_array
from ..inputs import Scores
from ..options import INPUT_OPTION, Option
from ..softmax import log_softmax, softmax
from ..solvers import minimize_newton, minimize_smooth

MAX_ITERATIONS_OPTION = Option(
    "max_iterations", int, 1000, "L-BFGS iterations at most; a fit stopped by this limit "
    "reports that it did not converge.", minimum=1)
ODIR_OPTIONS = (
    Option("off_diagonal_l2", float, 0.0, "λ of the ODIR penalty on off-diagonal weights.",
           minimum=0.0),
    Option("bias_l2", float, 0.0, "μ of the ODIR penalty on the intercepts.", minimum=0.0),
)


def standardisation(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column means and standard deviations of the features (a constant column gets scale 1)."""
    centre = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    return centre, scale


class _AffineSoftmax(Calibrator):
    full_matrix: ClassVar[bool]

    def _features(self, scores: Scores) -> np.ndarray:
        return scores.logits

    def _unpack(self, theta: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        split = k * k if self.full_matrix else k
        weights = theta[:split].reshape((k, k) if self.full_matrix else (k,))
        return weights, theta[split:]

    def _affine(self, x: np.ndarray, weights: np.ndarray, bias: np.ndarray) -> np.ndarray:
        return (x @ weights.T if self.full_matrix else x * weights) + bias

    def _fit(self, scores: Scores, labels: np.ndarray) -> FitDiagnostics:
        x = self._features(scores)
        n, k = x.shape
        rows = np.arange(n)
        lam = self.options.get("off_diagonal_l2", 0.0)
        mu = self.options.get("bias_l2", 0.0)
        off_diagonal = ~np.eye(k, dtype=bool)
        # The solver works in standardised coordinates (a linear change of variables that
        # leaves the optimum unchanged): W = W' / s column-wise and b = b' - W m, with m and s
        # the feature means and standard deviations. Log-probability features have means
        # far from 0, which otherwise couples weights and intercepts badly.
        centre, scale = standardisation(x)

        def original(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            weights, bias = self._unpack(theta, k)
            weights = weights / scale
            return weights, bias - (weights @ centre if self.full_matrix else weights * centre)

        def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
            weights, bias = original(theta)
            out = self._affine(x, weights, bias)
            shifted = out - out.max(axis=1, keepdims=True)
            e = np.exp(shifted)
            total = e.sum(axis=1)
            loss = float(np.mean(np.log(total) - shifted[rows, labels]))
            residual = e / total[:, None]
            residual[rows, labels] -= 1.0
            residual /= n
            grad_w = residual.T @ x if self.full_matrix else np.einsum("ij,ij->j", residual, x)
            grad_b = residual.sum(axis=0)
            if self.full_matrix and lam > 0:
                factor = lam / (k * (k - 1))
                loss += factor * float(np.sum(weights[off_diagonal] ** 2))
                grad_w = grad_w + 2 * factor * np.where(off_diagonal, weights, 0.0)
            if mu > 0:
                loss += mu / k * float(bias @ bias)
                grad_b = grad_b + 2 * mu / k * bias
            # chain rule back to the standardised coordinates
            if self.full_matrix:
                grad_w = (grad_w - np.outer(grad_b, centre)) / scale
            else:
                grad_w = (grad_w - grad_b * centre) / scale
            return loss, np.concatenate([grad_w.ravel(), grad_b])

        identity = np.eye(k) if self.full_matrix else np.ones(k)
        start = np.concatenate([(identity * scale).ravel(), centre])
        theta, diagnostics = minimize_smooth(objective, start, maxiter=self.options["max_iterations"])
        self.weights_, self.bias_ = original(theta)
        return diagnostics

    def _predict(self, scores: Scores) -> np.ndarray:
        return softmax(self._affine(self._features(scores), on_device(self.weights_, scores),
                                    on_device(self.bias_, scores)))

    def _params(self) -> dict:
        return {"weights": self.weights_.tolist(), "bias": self.bias_.tolist()}

    def _set_params(self, params: dict) -> None:
        k = self.n_classes_
        self.weights_ = param_array(params, "weights", (k, k) if self.full_matrix else (k,))
        self.bias_ = param_array(params, "bias", (k,))


class VectorScaling(_AffineSoftmax):
    """Vector scaling, ``softmax(w ⊙ z + b)`` (Guo et al. 2017).

    With only 2k parameters its exact Hessian is cheap, so it is fitted by a trust-region Newton
    method (scipy's ``trust-exact``) in standardised coordinates ``x̃ = (z - m) / s``, where
    ``z' = a ⊙ x̃ + c``. With ``P`` the probabilities and ``U = P ⊙ x̃``:
    ``H_aa = diag(Σ P x̃²)/n - UᵀU/n``, ``H_ac = diag(Σ P x̃)/n - UᵀP/n``,
    ``H_cc = diag(Σ P)/n - PᵀP/n``. It converges in tens of iterations where L-BFGS needs
    hundreds on many classes; the criterion (largest gradient entry ≤ 1e-6) is the same.
    """

    method = "vector"
    description = "Vector scaling (Guo et al. 2017): softmax(w * z + b), one scale and bias per class."
    options_spec = (INPUT_OPTION, MAX_ITERATIONS_OPTION)
    full_matrix = False

    def _fit(self, scores: Scores, labels: np.ndarray) -> FitDiagnostics:
        z = self._features(scores)
        n, k = z.shape
        rows = np.arange(n)
        centre, scale = standardisation(z)
        x = (z - centre) / scale
        state = {}

        def probabilities(theta: np.ndarray) -> np.ndarray:
            if state.get("theta") is None or not np.array_equal(state["theta"], theta):
                out = x * theta[:k] + theta[k:]
                out -= out.max(axis=1, keepdims=True)
                e = np.exp(out)
                total = e.sum(axis=1)
                state.update(theta=theta.copy(), p=e / total[:, None],
                             loss=float(np.mean(np.log(total) - out[rows, labels])))
            return state["p"]

        def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
            residual = probabilities(theta).copy()
            residual[rows, labels] -= 1.0
            return state["loss"], np.concatenate([np.einsum("ij,ij->j", residual, x), residual.sum(axis=0)]) / n

        def hessian(theta: np.ndarray) -> np.ndarray:
            p = probabilities(theta)
            u = p * x
            h = np.empty((2 * k, 2 * k))
            h[:k, :k] = np.diag(np.einsum("ij,ij->j", u, x)) - u.T @ u
            h[:k, k:] = np.diag(u.sum(axis=0)) - u.T @ p
            h[k:, :k] = h[:k, k:].T
            h[k:, k:] = np.diag(p.sum(axis=0)) - p.T @ p
            return h / n

        theta, diagnostics = minimize_newton(objective, hessian, np.concatenate([scale, centre]),
                                             maxiter=self.options["max_iterations"])
        self.weights_ = theta[:k] / scale
        self.bias_ = theta[k:] - self.weights_ * centre
        return diagnostics


class MatrixScaling(_AffineSoftmax):
    """Matrix scaling, ``softmax(W z + b)`` (Guo et al. 2017), optional ODIR penalty."""

    method = "matrix"
    description = "Matrix scaling (Guo et al. 2017): softmax(W z + b), with optional ODIR penalty."
    options_spec = (INPUT_OPTION, *ODIR_OPTIONS, MAX_ITERATIONS_OPTION)
    full_matrix = True


class DirichletCalibration(_AffineSoftmax):
    """Dirichlet calibration, ``softmax(W ln q + b)`` (Kull et al. 2019), optional ODIR."""

    method = "dirichlet"
    description = (
        "Dirichlet calibration (Kull et al. 2019): softmax(W ln q + b) on log-probabilities, "
        "with optional ODIR penalty."
    )
    options_spec = (INPUT_OPTION, *ODIR_OPTIONS, MAX_ITERATIONS_OPTION)
    full_matrix = True

    def _features(self, scores: Scores) -> np.ndarray:
        return log_softmax(scores.logits)

    def canonical_parameters(self) -> dict:
        """``A = W - column minima`` and ``c = softmax(W ln u + b)`` for uniform ``u``."""
        self._check_fitted()
        k = self.n_classes_
        a = self.weights_ - self.weights_.min(axis=0, keepdims=True)
        c = softmax(self.weights_ @ np.full(k, -np.log(k)) + self.bias_)
        return {"A": a.tolist(), "c": c.tolist()}

    def summary(self) -> dict:
        return {**self._params(), "canonical": self.canonical_parameters()}
