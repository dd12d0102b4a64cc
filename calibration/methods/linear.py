"""Affine maps of logit-like features followed by a softmax, fitted by penalised NLL.

* ``vector`` — vector scaling (Guo et al. 2017): ``softmax(w ⊙ z + b)``.
* ``matrix`` — matrix scaling (Guo et al. 2017): ``softmax(W z + b)``.
* ``dirichlet`` — Dirichlet calibration (Kull et al., "Beyond temperature scaling", NeurIPS
  2019): ``softmax(W ln q + b)`` with ``ln q = log_softmax(z)`` the log-probabilities.

Matrix and Dirichlet take the ODIR penalty of Kull et al., added to the mean NLL:
``λ/(k(k-1)) Σ_{i≠j} W_ij² + μ/k Σ_j b_j²`` (options ``off_diagonal_l2`` = λ and
``bias_l2`` = μ; both 0 by default, the unregularised fit). Each objective is convex and is
minimised from the identity map, in standardised feature coordinates (same optimum, far better
conditioned), by a trust-region Newton method with exact second derivatives: vector scaling
with its 2k × 2k Hessian (scipy ``trust-exact``), matrix and Dirichlet with Hessian-vector
products (``trust-ncg``; for k > 36, ``trust_region_pcg``, the same method with CG
preconditioned by the Hessian's class-diagonal blocks, the softmax's null directions deflated:
``class_block_preconditioner``): with ``P`` the probabilities, ``x̃`` the
features and ``V`` a direction, ``Hv = ((P ⊙ (Δ - (P ⊙ Δ)1))ᵀ [x̃ 1]) / n + penalty`` where ``Δ = [x̃ 1] Vᵀ``.
The gradient is ``(P - Y)ᵀ [x̃ 1] / n + penalty``. A fit reports convergence only when the
gradient's largest entry (in those coordinates) is at most 1e-6; a fit stopped by
``max_iterations`` does not.

No finite optimum (separable data). When some labels are separated perfectly by the map (e.g.
every label is its row's argmax, or a class never occurs), the NLL's infimum is approached only
as the weights grow without bound; ODIR does not prevent it, since it leaves the diagonal free.
Choice made here: such a fit is **reported as not converged** (``converged: false``, a
``ConvergenceWarning``, and a message saying that no finite optimum exists), keeping the
parameters where the solver stopped; it is not silently regularised. It is detected after a
solve that met its gradient tolerance (``solvers.keeps_receding``): the objective is below 1e-9
nats, or ten more full Newton steps each still move some logit gap by more than 0.5 while
lowering the loss (near a true minimiser Newton steps shrink quadratically; along a ray where
the loss decays like ``exp(-a t)`` each step has length ``1/a`` for ever) and the unpenalised
part of their sum raises no label's margin ``z_y - z_j`` (to 1e-6 of the largest rise) while
raising one: along such a direction the loss falls for ever, so no finite minimiser exists.

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

from typing import Any, ClassVar

import numpy as np

from ..base import Calibrator, FitDiagnostics, on_device, param_array
from ..inputs import InputBatch
from ..metrics.validated import BLOCK_ENTRIES, row_blocks
from ..options import INPUT_OPTION, Option
from ..softmax import log_softmax, softmax
from ..solvers import minimize_newton
from .affine_numerics import check_finite_optimum, softmax_and_nll, standardisation
from .class_block_preconditioner import MAX_BLOCK_ENTRIES, class_block_preconditioner
from .trust_region_pcg import minimize_newton_preconditioned

PRECONDITIONED_ABOVE = 36  # classes above which matrix and Dirichlet fits use the class-block preconditioner

MAX_ITERATIONS_OPTION = Option(
    "max_iterations", int, 1000, "Newton iterations at most; a fit stopped by this limit "
    "reports that it did not converge.", minimum=1, maximum=10_000)
ODIR_OPTIONS = (
    Option("off_diagonal_l2", float, 0.0, "λ of the ODIR penalty on off-diagonal weights.",
           minimum=0.0),
    Option("bias_l2", float, 0.0, "μ of the ODIR penalty on the intercepts.", minimum=0.0),
)


class _AffineSoftmax(Calibrator):
    full_matrix: ClassVar[bool]

    @staticmethod
    def solver_entries(k: int) -> int:
        """Numbers held by the dense matrices a full-matrix fit on ``k`` classes builds beyond its
        inputs: the class blocks and their inverses, ``2k(k+1)²``, where the preconditioned
        solver keeps them whole; else none of more than O(k²)."""
        d = k + 1
        return 2 * k * d * d if k > PRECONDITIONED_ABOVE and k * d * d <= MAX_BLOCK_ENTRIES else 0

    def _features(self, scores: InputBatch) -> np.ndarray:
        return scores.logits

    def _affine(self, x: np.ndarray, weights: np.ndarray, bias: np.ndarray) -> np.ndarray:
        return (x @ weights.T if self.full_matrix else x * weights) + bias

    def _fit(self, scores: InputBatch, labels: np.ndarray) -> FitDiagnostics:
        x = self._features(scores)
        n, k = x.shape
        rows = np.arange(n)
        factor = self.options.get("off_diagonal_l2", 0.0) / (k * (k - 1))
        bias_factor = self.options.get("bias_l2", 0.0) / k
        off_diagonal = ~np.eye(k, dtype=bool)
        # The solver works in standardised coordinates (a linear change of variables that
        # leaves the optimum unchanged): the logits are x̃ W'ᵀ + b' with x̃ = (x - m) / s, so
        # W = W' / s column-wise and b = b' - W m. Log-probability features have means far
        # from 0, which otherwise couples weights and intercepts badly.
        centre, scale = standardisation(x)
        x = (x - centre) / scale
        cache: dict[str, Any] = {}  # the last theta with its probabilities and NLL

        def original(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            weights = theta[: k * k].reshape(k, k) / scale
            return weights, theta[k * k:] - weights @ centre

        def penalty_gradient(theta: np.ndarray) -> np.ndarray:
            """Gradient of the (quadratic) penalty, pulled back to standardised coordinates;
            linear in ``theta``, so it is also the penalty's Hessian times ``theta``."""
            weights, bias = original(theta)
            grad_w, grad_b = 2 * factor * np.where(off_diagonal, weights, 0.0), 2 * bias_factor * bias
            return np.concatenate([((grad_w - np.outer(grad_b, centre)) / scale).ravel(), grad_b])

        def logits(theta: np.ndarray) -> np.ndarray:
            return x @ theta[: k * k].reshape(k, k).T + theta[k * k:]

        def probabilities(theta: np.ndarray) -> np.ndarray:
            if cache.get("theta") is None or not np.array_equal(cache["theta"], theta):
                p, nll = softmax_and_nll(logits(theta), labels)
                cache.update(theta=theta.copy(), p=p, nll=nll)
            return cache["p"]

        def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
            residual = probabilities(theta).copy()
            residual[rows, labels] -= 1.0
            residual /= n
            weights, bias = original(theta)
            loss = cache["nll"] + factor * float(np.sum(weights[off_diagonal] ** 2)) + bias_factor * float(bias @ bias)
            gradient = np.concatenate([(residual.T @ x).ravel(), residual.sum(axis=0)])
            return loss, gradient + penalty_gradient(theta)

        def hessp(theta: np.ndarray, v: np.ndarray) -> np.ndarray:
            p = probabilities(theta)
            change = p * logits(v)
            change -= p * change.sum(axis=1, keepdims=True)
            change /= n
            return np.concatenate([(change.T @ x).ravel(), change.sum(axis=0)]) + penalty_gradient(v)

        start = np.concatenate([np.diag(scale).ravel(), centre])
        # 36: dirichletcal's switch to L-BFGS. (At k = 10 the preconditioned path measured faster
        # too, 0.04-0.35 s against 0.05-0.85 s on 5000-row CIFAR-10 sets, and converged where
        # trust-ncg hit 1000 steps: matrix, λ = 0, ResNet-50 focal loss; not switched yet.)
        if k <= PRECONDITIONED_ABOVE:
            theta, diagnostics = minimize_newton(objective, None, start, hessp=hessp,
                                                 maxiter=self.options["max_iterations"])
        else:  # measured at k = 100: trust-ncg stalled after 30 steps (see the preconditioner)
            build = class_block_preconditioner(np.concatenate([x, np.ones((n, 1))], axis=1),
                                               factor, bias_factor, centre, scale)
            theta, diagnostics = minimize_newton_preconditioned(
                objective, hessp, lambda theta: build(probabilities(theta)), start,
                maxiter=self.options["max_iterations"])
        self.weights_, self.bias_ = original(theta)

        def free_logits(v: np.ndarray) -> np.ndarray:
            """Logit change along the unpenalised part of ``v`` (in original coordinates)."""
            weights, bias = original(v)
            weights = np.where(off_diagonal, 0.0, weights) if factor > 0 else weights
            return (x * scale + centre) @ weights.T + (0.0 if bias_factor > 0 else bias)

        return check_finite_optimum(diagnostics, objective, hessp, logits, theta, labels, free_logits)

    def _predict(self, scores: InputBatch) -> np.ndarray:
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

    def _predict(self, scores: InputBatch) -> np.ndarray:
        if scores.xp is not np:
            return super()._predict(scores)
        out = np.empty((scores.n, scores.k))
        for rows in row_blocks(scores.n, scores.k):  # float32 input widened a block at a time
            out[rows] = softmax(scores.logit_rows(rows) * self.weights_ + self.bias_, overwrite=True)
        return out

    def _fit(self, scores: InputBatch, labels: np.ndarray) -> FitDiagnostics:
        # float32 logits are read as given: each block is widened when standardised (exactly)
        z = scores.given if scores.xp is np and scores.source == "logits" else self._features(scores)
        n, k = z.shape
        # the sums over rows in blocks of about BLOCK_ENTRIES entries (one block, the whole
        # array at once, up to 5000 x 100): the fit then holds a block's standardised features
        # and probabilities, not ~5.5 float64 copies of the rows (auto's peak memory
        # at large sizes is vector scaling's fit); so do the standardisation and the
        # check for a finite optimum
        blocks = row_blocks(n, k, BLOCK_ENTRIES)
        centre, scale = standardisation(z, blocks)

        def features(block: slice) -> np.ndarray:
            return (z[block] - centre) / scale

        def probabilities(theta: np.ndarray, block: slice, x: np.ndarray) -> tuple[np.ndarray, float]:
            return softmax_and_nll(x * theta[:k] + theta[k:], labels[block])

        def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
            loss, gradient = 0.0, np.zeros(2 * k)
            for block in blocks:
                x = features(block)
                residual, nll = probabilities(theta, block, x)
                residual[np.arange(len(x)), labels[block]] -= 1.0
                loss += nll * (len(x) / n)  # one block: the mean NLL itself, to the bit
                gradient[:k] += np.einsum("ij,ij->j", residual, x)
                gradient[k:] += residual.sum(axis=0)
            return loss, gradient / n

        def hessian(theta: np.ndarray) -> np.ndarray:
            h = np.zeros((2 * k, 2 * k))
            for block in blocks:
                x = features(block)
                p, _ = probabilities(theta, block, x)
                u = p * x
                h[:k, :k] += np.diag(np.einsum("ij,ij->j", u, x)) - u.T @ u
                h[:k, k:] += np.diag(u.sum(axis=0)) - u.T @ p
                h[k:, k:] += np.diag(p.sum(axis=0)) - p.T @ p
            h[k:, :k] = h[:k, k:].T
            return h / n

        theta, diagnostics = minimize_newton(objective, hessian, np.concatenate([scale, centre]),
                                             maxiter=self.options["max_iterations"])
        self.weights_ = theta[:k] / scale
        self.bias_ = theta[k:] - self.weights_ * centre
        last: dict[str, np.ndarray] = {}  # the last t with its Hessian

        def hessp(t: np.ndarray, v: np.ndarray) -> np.ndarray:
            if last.get("t") is None or not np.array_equal(last["t"], t):
                last.update(t=t.copy(), h=hessian(t))
            return last["h"] @ v

        return check_finite_optimum(diagnostics, objective, hessp, lambda v, block: features(block) * v[:k] + v[k:],
                                    theta, labels, blocks=blocks)


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

    def _features(self, scores: InputBatch) -> np.ndarray:
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
