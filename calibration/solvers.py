"""Solvers that converge and say when they do not.

* ``increasing_root``: the root of an increasing 1-D function on a positive bracket, by
  Halley's method (cubic convergence; Newton's where no second derivative is given)
  safeguarded with bisection in log space. Used for the inverse temperature of temperature
  scaling (the NLL derivative is increasing: the NLL is convex in 1/T) and of expectation
  consistency (mean confidence is increasing in 1/T). The tolerance comes from the dtype:
  the iteration stops after a step below eps^(1/3) relative (Halley) or sqrt(eps) (Newton),
  after which the error is of order eps. Given a ``scout`` (a cheaper ``g``, here float32
  passes over the logits), the steps are taken on it until one is below ``SCOUT_STEP``
  relative; then ``g`` takes over and ends the solve, so the root is ``g``'s.
* ``minimize_smooth``: L-BFGS-B with an analytic gradient, run to a tight gradient tolerance;
  the fit counts as converged when the final gradient's largest entry is below ``gtol``.
* ``minimize_newton``: trust-region Newton with the exact Hessian (``trust-exact``) or
  Hessian-vector products (``trust-ncg``); same criterion.
  (Matrix and Dirichlet scaling with many classes use ``calibration.methods.trust_region_pcg``,
  with a class-block preconditioner.)
* ``keeps_receding``: whether a convex NLL has no finite minimiser along the direction Newton's
  method takes from a solution (separable data), so that a fit can say so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .base import FitDiagnostics

# scipy.optimize, scipy.sparse.linalg and calibration.trust_exact (scipy.linalg) are imported in the
# functions that use them: every process that imports the core would load them at start otherwise

EPS = float(np.finfo(np.float64).eps)
RTOL = math.sqrt(EPS)
RTOL_HALLEY = EPS ** (1 / 3)
SCOUT_STEP = 1e-2  # a scout's step below this (relative) hands the solve to g


@dataclass
class RootResult:
    x: float
    iterations: int
    converged: bool
    value: float
    message: str


def increasing_root(
    g: Callable[[float], tuple[float, ...]],
    x0: float,
    lo: float,
    hi: float,
    rtol: float | None = None,
    maxiter: int = 200,
    scout: Callable[[float], tuple[float, ...]] | None = None,
) -> RootResult:
    """Root of an increasing ``g`` on ``[lo, hi]`` (``0 < lo < hi``); ``g(x)`` returns the value,
    the derivative and optionally the second derivative. The caller must know that
    ``g(lo) < 0 < g(hi)``; a root that is not inside the bracket ends with ``converged=False``.
    ``rtol`` overrides the dtype-derived tolerance (e.g. for a rough warm start).

    Safeguards (as ``rtsafe`` in Numerical Recipes): a step that leaves the known bracket, or
    that is not at most half of the step before the last, is replaced by bisection in log x,
    so the bracket shrinks geometrically whatever the function does. A step too small to move
    ``x`` (below half its ulp) ends the solve there, converged.

    ``scout``: an approximation of ``g`` (to ~1e-6 of its scale) that costs less. It is evaluated
    instead of ``g`` until a step is below ``SCOUT_STEP`` relative, or its bracket closes; its
    values never end the solve, and bracket and bound only the scouting steps (near the root
    their signs may be wrong): ``g`` takes over from the scouts' last iterate with the whole
    ``[lo, hi]`` and no step before it.
    """
    a, b = lo, hi
    seen_negative = seen_positive = False
    x = min(max(x0, a), b)
    value = math.nan
    step_before = step_last = math.inf
    scouting = scout is not None
    for iteration in range(1, maxiter + 1):
        value, slope, *rest = (scout if scout is not None and scouting else g)(x)
        if value == 0.0 and not scouting:
            return RootResult(x, iteration, True, value, "exact root")
        if value < 0:
            a, seen_negative = x, not scouting
        else:
            b, seen_positive = x, not scouting
        step, name, tolerance = math.nan, "Newton", RTOL
        if slope > 0:
            step = value / slope
            if rest:
                denominator = 1.0 - step * rest[0] / (2.0 * slope)
                if denominator > 0.5:  # Halley's correction, where it is a modest one
                    step, name, tolerance = step / denominator, "Halley", RTOL_HALLEY
        candidate = x - step
        # a step below half an ulp leaves x where it is (possibly on a bracket end): x is the root
        if (a < candidate < b or candidate == x) and abs(step) <= 0.5 * step_before:
            if not scouting and abs(step) <= (rtol or tolerance) * candidate:
                return RootResult(candidate, iteration, True, value, f"{name} step below tolerance")
        else:
            if b / a - 1.0 <= (rtol or RTOL) and not scouting:
                if seen_negative and seen_positive:
                    return RootResult(math.sqrt(a * b), iteration, True, value, "bracket below tolerance")
                side = "below" if seen_positive else "above"
                return RootResult(math.sqrt(a * b), iteration, False, value,
                                  f"the root lies {side} [{lo:g}, {hi:g}]")
            candidate = math.sqrt(a * b)
        if scouting and (abs(candidate - x) <= SCOUT_STEP * x or b / a - 1.0 <= SCOUT_STEP):
            scouting, a, b = False, lo, hi  # g takes over; the scouts' signs bracket nothing for it,
            step_before = step_last = math.inf  # nor do their steps bound g's
        else:
            step_before, step_last = step_last, abs(candidate - x)
        x = candidate
    return RootResult(x, maxiter, False, value, f"no convergence in {maxiter} iterations")


def minimize_smooth(
    fun: Callable[[np.ndarray], tuple[float, np.ndarray]],
    x0: np.ndarray,
    *,
    gtol: float = 1e-6,
    maxiter: int = 20000,
) -> tuple[np.ndarray, FitDiagnostics]:
    """Minimise a smooth function given with its analytic gradient (L-BFGS-B)."""
    from scipy.optimize import minimize

    result = minimize(
        fun,
        x0,
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": maxiter, "maxfun": 2 * maxiter, "gtol": gtol * 1e-3, "ftol": 0.0,
                 "maxcor": 30},
    )
    return result.x, _diagnostics(result, gtol)


def minimize_newton(
    fun: Callable[[np.ndarray], tuple[float, np.ndarray]],
    hess: Callable[[np.ndarray], np.ndarray] | None,
    x0: np.ndarray,
    *,
    hessp: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
    gtol: float = 1e-6,
    maxiter: int = 1000,
) -> tuple[np.ndarray, FitDiagnostics]:
    """Minimise a smooth convex function given with its gradient and exact second derivatives by
    a trust-region Newton method: with the Hessian ``hess``, scipy's ``trust-exact`` (which copes
    with a singular Hessian; its subproblem as ``calibration.trust_exact`` solves it, the same
    iterates with three n×n matrices held instead of five); with Hessian-vector products
    ``hessp`` instead, ``trust-ncg`` (Newton-CG in a trust region, Steihaug 1983; Nocedal &
    Wright §7.1), which needs neither the Hessian in memory nor its factorisation.
    (``trust-krylov`` stopped early here, at a "bad approximation", on ill-conditioned
    matrix-scaling fits that ``trust-ncg`` finished.) Same criterion as ``minimize_smooth``:
    converged when the largest gradient entry is at most ``gtol``."""
    from scipy.optimize import minimize

    from .trust_exact import minimize_trust_exact

    if hess is not None:  # scipy's trust-exact, holding fewer n x n matrices (trust_exact.py)
        result = minimize_trust_exact(fun, x0, hess, {"maxiter": maxiter, "gtol": gtol * 1e-3})
    else:
        result = minimize(fun, x0, jac=True, hessp=hessp, method="trust-ncg",
                          options={"maxiter": maxiter, "gtol": gtol * 1e-3})
    return result.x, _diagnostics(result, gtol)


@dataclass
class _Result:
    x: np.ndarray
    fun: float
    jac: np.ndarray
    nit: int
    message: str


def keeps_receding(
    fun: Callable[[np.ndarray], tuple[float, np.ndarray]],
    hessp: Callable[[np.ndarray, np.ndarray], np.ndarray],
    logit_spread: Callable[[np.ndarray], float],
    theta: np.ndarray,
    *,
    certify: Callable[[np.ndarray], bool] | None = None,
    steps: int = 10,
    move: float = 0.5,
    vanishing: float = 1e-9,
) -> bool:
    """Whether a convex loss of logits linear in ``theta`` (an NLL of softmax outputs) has no
    finite minimiser in the direction Newton's method takes from ``theta``.

    Near a minimiser Newton steps shrink quadratically, so a step soon moves no logit by more
    than ``move`` (``logit_spread(step)``: the largest change of a difference of two logits of
    one row). On a ray along which the loss decays like ``c·exp(-a t)`` (separable data: the
    loss's infimum is approached only as the weights grow without bound) each Newton step is
    ``1/a`` long for ever: it keeps moving some logit gap by about 1 and keeps lowering the loss.
    This returns True when ``steps`` successive full Newton steps each move a logit gap by more
    than ``move`` without raising the loss, or when the loss is (or falls) below ``vanishing``
    nats: a mean NLL that small is reached only by separating the classes, and there the
    Hessian is near rounding level, so that Newton steps stop being meaningful. After the
    ``steps`` Newton steps, ``certify(direction)`` (the sum of the steps) must confirm that the
    direction is one along which the loss never rises (the caller checks it exactly, e.g. that
    no label's logit margin falls along it), so that a far but finite optimum is not mistaken
    for none. The Newton systems are solved by MINRES (the Hessian is singular along the
    directions that leave the softmax unchanged) to a relative residual of 1e-6.
    """
    from scipy.sparse.linalg import LinearOperator, minres

    loss, gradient = fun(theta)
    start, size = theta, theta.size
    for _ in range(steps):
        if loss <= vanishing:
            return True
        operator = LinearOperator((size, size), matvec=lambda v, t=theta: hessp(t, v), dtype=np.float64)
        step = minres(operator, -gradient, rtol=1e-6, maxiter=min(10 * size, 200))[0]
        if not logit_spread(step) > move:
            return False
        new_loss, new_gradient = fun(theta + step)
        if not new_loss <= loss:
            return False
        theta, loss, gradient = theta + step, new_loss, new_gradient
    return loss <= vanishing or certify is None or certify(theta - start)


def _diagnostics(result, gtol: float) -> FitDiagnostics:
    """Converged when the largest gradient entry at the solution is at most ``gtol``."""
    gradient_norm = float(np.max(np.abs(result.jac))) if result.jac.size else 0.0
    converged = gradient_norm <= gtol
    message = str(result.message)
    if not converged:
        message = f"gradient {gradient_norm:.3g} above {gtol:g} after {result.nit} iterations: {message}"
    return FitDiagnostics(
        converged=converged,
        iterations=int(result.nit),
        message=message,
        gradient_norm=gradient_norm,
        objective=float(result.fun),
    )
