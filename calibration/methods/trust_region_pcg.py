"""Trust-region Newton-CG with a general (non-diagonal) preconditioner, for the matrix and
Dirichlet fits with many classes (``linear``; the preconditioner is
``class_block_preconditioner``).

Each step minimises the quadratic model ``g·s + ½ sᵀHs`` (``H`` through Hessian-vector
products) in the region ``‖s‖_M ≤ Δ`` by Steihaug's truncated preconditioned conjugate
gradients (Steihaug 1983; Nocedal & Wright, Alg. 7.2; Lin, Weng & Keerthi 2008 for the same
method on logistic regression), where ``M⁻¹`` is the preconditioner, given only as
``z = M⁻¹ r``: the region's norm of the CG iterates comes from the recurrences of Gould,
Lucidi, Roma & Toint 1999 (Conn, Gould & Toint, *Trust-Region Methods*, 2000, §7.5.1),
``‖s+αp‖²_M = ‖s‖²_M + 2α sᵀMp + α² pᵀMp``, ``sᵀMp ← β (sᵀMp + α pᵀMp)``,
``pᵀMp ← rᵀz + β² pᵀMp``, so ``M`` itself is never applied. CG stops at the boundary, at
negative curvature or at a residual of ``min(0.5, sqrt(|r₀|))·|r₀|`` in ``M⁻¹``'s norm (a
superlinear inexact Newton method); the region grows after a good step on its boundary
(ρ > 3/4) and shrinks to a quarter of the step after a poor one (ρ < 1/4); a step is taken
when ρ > 0.1 (or, where the predicted decrease is within rounding of the loss, when the loss
does not rise). The preconditioner is rebuilt only where the iterate moved. Converged when the
largest gradient entry is at most ``gtol`` (as ``solvers.minimize_newton``); a fit stopped by
``maxiter``, or whose rejected steps shrink below the rounding of the iterate, says that it did
not converge.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..base import FitDiagnostics
from ..solvers import EPS, _diagnostics, _Result

Solve = Callable[[np.ndarray], np.ndarray]


def minimize_newton_preconditioned(
    fun: Callable[[np.ndarray], tuple[float, np.ndarray]],
    hessp: Callable[[np.ndarray, np.ndarray], np.ndarray],
    preconditioner: Callable[[np.ndarray], Solve],
    x0: np.ndarray,
    *,
    gtol: float = 1e-6,
    maxiter: int = 1000,
) -> tuple[np.ndarray, FitDiagnostics]:
    """Minimise ``fun`` (value and gradient) from ``x0``; ``preconditioner(x)`` returns
    ``r ↦ M⁻¹ r`` (symmetric, positive semi-definite, positive on the gradient's range).
    The message counts the Hessian-vector products."""
    x = np.array(x0, dtype=np.float64)
    f, g = fun(x)
    radius, products, message = math.inf, 0, f"no convergence in {maxiter} iterations"
    iteration = 0
    solve: Solve | None = None
    built_at: np.ndarray | None = None
    for iteration in range(1, maxiter + 1):
        if float(np.max(np.abs(g))) <= gtol * 1e-3:
            message, iteration = "gradient below tolerance", iteration - 1
            break
        if solve is None or built_at is not x:  # (solve is None only before the first build)
            solve, built_at = preconditioner(x), x
        s, hs = np.zeros_like(x), np.zeros_like(x)
        r, z = g.copy(), solve(g)
        p, rz = -z, float(g @ z)
        if not math.isfinite(radius):
            radius = math.sqrt(rz)  # a first region as large as the gradient
        ss, sp, pp = 0.0, 0.0, rz  # ‖s‖²_M, sᵀMp, pᵀMp
        tolerance = min(0.5, math.sqrt(math.sqrt(rz))) * math.sqrt(rz)
        boundary = False
        for _ in range(x.size):
            hp = hessp(x, p)
            products += 1
            curvature = float(p @ hp)
            if curvature > 0:
                alpha = rz / curvature
                ss_next = ss + 2 * alpha * sp + alpha * alpha * pp
                if ss_next < radius**2:
                    s, hs, ss = s + alpha * p, hs + alpha * hp, ss_next
                    r = r + alpha * hp
                    z = solve(r)
                    rz_next = float(r @ z)
                    if math.sqrt(rz_next) <= tolerance:
                        break
                    beta = rz_next / rz
                    sp, pp = beta * (sp + alpha * pp), rz_next + beta * beta * pp
                    p, rz = -z + beta * p, rz_next
                    continue
            # to the boundary along p: ‖s + τ p‖_M = radius
            c = ss - radius**2
            tau = (-sp + math.sqrt(sp * sp - pp * c)) / pp
            s, hs, ss, boundary = s + tau * p, hs + tau * hp, radius**2, True
            break
        predicted = -(float(g @ s) + 0.5 * float(s @ hs))
        f_new, g_new = fun(x + s)
        actual = f - f_new
        rounding = predicted <= 64 * EPS * max(abs(f), 1e-300)
        rho = actual / predicted if predicted > 0 else -math.inf
        if rho < 0.25 and not (rounding and actual >= 0):
            radius = 0.25 * math.sqrt(ss)
        elif rho > 0.75 and boundary:
            radius *= 2
        if rho > 0.1 or (rounding and actual >= 0):
            x, f, g = x + s, f_new, g_new
        elif float(np.max(np.abs(s))) <= 4 * EPS * max(1.0, float(np.max(np.abs(x)))):
            message = "the trust region shrank to rounding level"
            break
    result = _Result(x, f, g, iteration, f"{message} ({products} Hessian-vector products)")
    return x, _diagnostics(result, gtol)
