"""The Brier-optimal temperature by Halley's method, and ETS's quadratic, in blocked passes
(the objective is Mix-n-Match's, Zhang, Kailkhura & Han, ICML 2020).

With ``d = z - max z``, ``e = exp(beta d)``, ``p = e / s0`` and per-row sums
``s_j = sum e d^j``, ``a_j = sum e^2 d^j`` (so ``m = s1/s0``, ``V`` and ``M3`` are the mean,
variance and third central moment of ``d`` under ``p``, and ``A, B, C, D = a_0..3 / s0^2``), the
row's squared error ``L = sum (p - y)^2 = A - 2 p_y + 1`` has, in ``beta = 1/T``
(``p_j' = p_j (d_j - m)``, ``m' = V``, ``V' = M3``, ``g = d_y - m``, ``H = B - A m``):

    L'  = 2 (H - p_y g)
    L'' = 2 (H' - p_y g^2 + p_y V),       H' = 2 (C - B m) - 2 H m - A V
    L''' = 2 (2 [2 (D - C m) - 2 (C - B m) m - B V] - 2 (H' m + H V) - (2 H V + A M3)
              - p_y g^3 + 3 p_y g V + p_y M3)

One pass over row blocks that stay in cache gives all of them; nothing of size n x k is
allocated.

``fit_brier_temperature``: the Brier objective is not convex, so its basin is found as
``temperature.solve_brier_temperature`` finds it (the minimum of ``GRID_FACTORS`` around the
NLL-optimal temperature), but on a coarse subsample of rows; Halley's method on ``L'`` then runs
on a warm-start subsample (where it is at most a quarter of the rows) and on all rows. The
subsamples are sized in entries, not rows (``COARSE_ROWS`` and ``WARM_START_ROWS`` rows of
``ENTRY_CLASSES`` classes, at least ``MIN_COARSE_ROWS`` and ``MIN_WARM_ROWS`` rows), so that at
vocabularies of 10^4-10^5 classes the grid's two dozen evaluations cost a few passes over the
logits, not two dozen. The warm start is expected within ``WARM_DISTANCE`` of the full-data
optimum (the subsample's own optimum differs from it by sampling error). From the second
full-data pass on, the step goes to the root of the quintic that matches ``L'``, ``L''`` and
``L'''`` at the last two iterates (``hermite_root``; error ``O(e0^3 e1^3)``, where Halley's is
``O(e1^3)``), so that from ``WARM_DISTANCE`` the solve reads the logits two or three times (four
from the far end), the last pass taking ETS's quadratic (where the slope's fourth derivative, which
no pass computes, makes Halley's error K e^3 larger than predicted, twice).
Each step must stay within ``[beta0 / 4, 4 beta0]``, at most halve the step before (or, on the
same side, at most ``GROWTH`` times it) and see ``L'' > 0``; where a safeguard fails, and on
batches of at most ``4 * WARM_START_ROWS`` rows and ``4 * WARM_START_ROWS * ENTRY_CLASSES``
entries, the full-data grid is used. The solve stops after a step below ``STEP_TOLERANCE``
relative; after a Halley step of 1e-6 the iterate is exact to O(1e-18) (1e-12 where the Newton
step had to be taken).

Scouting passes (``scout=True``): the passes whose sums cannot end the solve (the full-data ones
before the pass that takes ETS's quadratic, and the subsamples') compute in float32, row sums
and dot products accumulated as ``row_dots`` says. Their derivatives agree with float64's to
~1e-6 of their scale, so their steps land where float64's would to 1e-8-1e-7 relative; the pass that
ends the solve is float64, so the result is float64's to the solve's own error. Entries of
``d`` far below the row's maximum are floored (``ShiftedLogits.blocks``): their ``exp`` is 0 either way.

``BrierSums.quadratic``: ETS's mse weight problem ``w' G w - 2 h' w + 1`` needs ``G`` (means of
``<p_a, p_b>`` over the components ``softmax(beta d)``, ``softmax(d)``, ``1/k``) and ``h``
(means of each component's label entry); ``softmax(d)`` is never formed:
``<p_beta, p_1> = sum exp(beta d) exp(d) / (s0(beta) s0(1))``. The last pass of the solve
computes these sums too, at the iterate before the final step ``delta``; the values at the
final ``beta`` are their second-order Taylor expansions (the derivatives come from the same
sums and one more row sum, ``sum exp(beta d) exp(d) d^2``), exact to O(delta^3) <= 1e-18.
"""

from __future__ import annotations

import numpy as np
from numpy.polynomial import Polynomial

from ..base import FitDiagnostics
from .row_dots import padded_width, row_products
from .shifted_logits import DeviceShiftedLogits, ShiftedLogits
from .temperature import WARM_START_ROWS, grid_minimum, solve_brier_temperature, solve_nll_temperature

STEP_TOLERANCE = 1e-6
SCOUT_RTOL = 1e-3  # a solve to at least this (relative) may end on a scouting pass (the warm start's)
NEAR = 1e-2  # a Halley step below this (relative) is followed by one of about K times its cube
HERMITE_MARGIN = 0.1  # a Hermite step's predicted error (rough: within 10x) is held to this times the tolerance
COARSE_ROWS = 1024
MIN_COARSE_ROWS = 64
MIN_WARM_ROWS = 256
ENTRY_CLASSES = 1000  # the subsamples hold COARSE_ROWS or WARM_START_ROWS rows of this many classes
BLOCK_ELEMENTS = 1 << 15  # rows of 256 KiB float64 blocks: a pass's four buffers stay in a core's L2 cache
MAX_STEPS = 30
GROWTH = 2.0  # the largest growth of a step on the side of the one before
WARM_DISTANCE = 0.2  # the warm start's expected distance from the full-data optimum (relative)
WARM_RTOL = 1e-2  # the warm subsample's solve: its optimum is itself WARM_DISTANCE from the full data's
HERMITE_NEWTON_STEPS = 20
# (left, right) of each row sum in BrierSums' products: s_0..s_3 = sum e d^j, a_0..a_3 = sum e^2 d^j,
# then sum t, sum t^2, sum e t, sum e t d, sum e t d^2 (left: e, e d, e d^2, t; right: 1, d, e, e d, e d^2, t)
SUMS = ((0, 0), (0, 1), (1, 1), (2, 1), (0, 2), (0, 3), (1, 3), (1, 4), (3, 0), (3, 5), (0, 5), (1, 5), (2, 5))
EPS = float(np.finfo(np.float64).eps)


class BrierSums:
    """The mean Brier score at ``beta`` with its first three derivatives in beta (only the
    score with ``loss_only``) and, with ``quadratic=True``, ETS's Gram matrix and linear term
    with their derivatives in beta."""

    def __init__(self, shifted: ShiftedLogits, beta: float, quadratic: bool = False,
                 loss_only: bool = False, scout: bool = False):
        if scout and quadratic:
            raise ValueError("ETS's quadratic is taken in float64, not by a scouting pass")
        n, k = shifted.n, shifted.k
        self.beta, self.k = beta, k
        block_rows = max(1, BLOCK_ELEMENTS // k)
        dtype = np.float32 if scout else np.float64
        # the pass's vectors, stacked (rows of padded_width, zero past k): 1, d, e = exp(beta d),
        # e d, e d^2 and, for the quadratic, t = exp(d); each row sum is the product of one of e,
        # e d, e d^2, t (left) with one of them all (right): SUMS, BLAS products a block (row_products)
        vectors = 3 if loss_only else 6 if quadratic else 5
        stack = np.zeros((vectors, block_rows, padded_width(k, dtype)), dtype)
        stack[0, :, :k] = 1.0
        wanted = (0, 4) if loss_only else range(13 if quadratic else 8)  # of SUMS
        pairs = [SUMS[j] for j in wanted]
        sums = np.empty((n, len(pairs)))
        for rows, d in shifted.blocks(block_rows, out=stack[1]):
            e = stack[2, : len(d), :k]
            np.multiply(d, beta, out=e)
            np.exp(e, out=e)
            if not loss_only:
                np.multiply(e, d, out=stack[3, : len(d), :k])
                np.multiply(stack[3, : len(d), :k], d, out=stack[4, : len(d), :k])
            if quadratic:
                np.exp(d, out=stack[5, : len(d), :k])
            row_products(stack[2:, : len(d)], stack[:, : len(d)], pairs, out=sums[rows], ones=(None, 0))
        row_sums = dict(zip(wanted, np.ascontiguousarray(sums.T), strict=True))  # whole rows for the arithmetic
        s0 = row_sums[0]
        d_y = shifted.d_label
        p_y = np.exp(beta * d_y) / s0
        big_a = row_sums[4] / (s0 * s0)
        self.loss = float(np.mean(big_a - 2 * p_y + 1))
        if loss_only:
            return
        m = row_sums[1] / s0
        var = row_sums[2] / s0 - m * m
        third = row_sums[3] / s0 - 3 * m * row_sums[2] / s0 + 2 * m ** 3
        big_b, big_c, big_d = (row_sums[j] / (s0 * s0) for j in (5, 6, 7))
        g = d_y - m
        h = big_b - big_a * m
        h_slope = 2 * (big_c - big_b * m) - 2 * h * m - big_a * var
        outer = 2 * (2 * (big_d - big_c * m) - 2 * (big_c - big_b * m) * m - big_b * var)
        outer -= 2 * (h_slope * m + h * var) + 2 * h * var + big_a * third
        outer += p_y * (-g ** 3 + 3 * g * var + third)
        self.slope = float(2 * np.mean(h - p_y * g))
        self.curvature = float(2 * np.mean(h_slope - p_y * g * g + p_y * var))
        self.third = float(2 * np.mean(outer))
        if quadratic:
            t0 = row_sums[8]
            x, x1, x2 = (row_sums[j] / (s0 * t0) for j in (10, 11, 12))  # U_j = sum e t d^j / (s0 t0)
            self.sums = np.array([np.mean(big_a), 2 * np.mean(h), np.mean(x), np.mean(x1 - m * x),
                                  np.mean(row_sums[9] / (t0 * t0)), np.mean(p_y), np.mean(p_y * g),
                                  np.mean(np.exp(d_y) / t0)])
            # second derivatives: A'' = 2 H', U_0'' = U_2 - 2 m U_1 - (V - m^2) U_0, p_y'' = p_y (g^2 - V)
            self.curvatures = np.array([2 * np.mean(h_slope), np.mean(x2 - 2 * m * x1 - (var - m * m) * x),
                                        np.mean(p_y * (g * g - var))])

    def quadratic(self, delta: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """ETS's ``(G, h)`` at ``beta + delta`` (second order in ``delta``)."""
        a, a_slope, x, x_slope, g11, p_y, p_y_slope, q_y = self.sums
        a_curve, x_curve, p_y_curve = self.curvatures * (delta * delta / 2)
        k = self.k
        gram = np.full((3, 3), 1.0 / k)
        gram[0, 0] = a + delta * a_slope + a_curve
        gram[0, 1] = gram[1, 0] = x + delta * x_slope + x_curve
        gram[1, 1] = g11
        return gram, np.array([p_y + delta * p_y_slope + p_y_curve, q_y, 1.0 / k])


def scouted(shifted: ShiftedLogits, beta: float, loss_only: bool = False) -> BrierSums:
    """The scouting pass's ``BrierSums`` (float32, module docstring); float32 logits whose ``d``
    overflows are floored as ``ShiftedLogits.blocks`` says, silently."""
    with np.errstate(over="ignore"):
        return BrierSums(shifted, beta, loss_only=loss_only, scout=True)


def _halley_step(sums: BrierSums) -> float | None:
    if not sums.curvature > 0:
        return None
    step = sums.slope / sums.curvature
    denominator = 1.0 - step * sums.third / (2.0 * sums.curvature)
    return step / denominator if denominator > 0.5 else step


def hermite_root(before: BrierSums, now: BrierSums, guess: float) -> float | None:
    """The root nearest ``guess`` of the quintic in beta that matches the slope and its first two
    derivatives at the iterates ``before.beta`` and ``now.beta`` (Hermite interpolation by
    confluent divided differences; Newton's method on the polynomial from ``guess``), or ``None``
    where that does not settle. Its error is of order ``C e0^3 e1^3`` in the two iterates'
    errors, where a Halley step from ``now`` alone leaves ``K e1^3``: the derivatives of the pass
    before stand in for a further pass over the logits."""
    nodes = np.array([before.beta] * 3 + [now.beta] * 3) - now.beta  # in t = beta - now.beta
    known = [(s.slope, s.curvature, s.third / 2.0) for s in (before, now)]  # f, f', f''/2!
    table = np.zeros((6, 6))
    table[:, 0] = [known[i // 3][0] for i in range(6)]
    for j in range(1, 6):
        for i in range(j, 6):
            if nodes[i] == nodes[i - j]:  # a node repeated j + 1 times: its j-th derivative / j!
                table[i, j] = known[i // 3][j]
            else:
                table[i, j] = (table[i, j - 1] - table[i - 1, j - 1]) / (nodes[i] - nodes[i - j])
    poly, basis = Polynomial([0.0]), Polynomial([1.0])
    for j in range(6):
        poly, basis = poly + table[j, j] * basis, basis * Polynomial([-nodes[j], 1.0])
    slope = poly.deriv()
    t = guess - now.beta
    for _ in range(HERMITE_NEWTON_STEPS):
        change = poly(t) / slope(t)
        t -= change
        if abs(change) <= EPS * abs(now.beta):
            return now.beta + t
    return None


def halley_brier(shifted: ShiftedLogits, beta: float, rtol: float, quadratic: bool = False):
    """Halley's method on the Brier slope from ``beta`` (module docstring), each step after the
    first taken to the two-point Hermite root (``hermite_root``) where that lies within half the
    Halley step of the Halley iterate: ``(beta, sums at the last iterate, the final step,
    iterations)``, or ``None`` where a safeguard fails. With ``quadratic``, the last iterate's
    sums include ETS's quadratic, in float64; they are taken after a scout's step below ``rtol``
    (taken: a step's error is the scout's, ~1e-7), or after a step whose predicted error is below
    ``rtol``: a Halley step below ``NEAR`` (``_halley_error``), or a Hermite step (its correction of
    the Halley step, which estimates Halley's error, times the cube of the step before, relative,
    below ``HERMITE_MARGIN * rtol``). So one pass takes the quadratic: its step ends the solve."""
    step_before, near, before, scouting = np.inf, False, None, True
    lo, hi = beta / 4, 4 * beta
    for iteration in range(1, MAX_STEPS + 1):
        final = (quadratic and near) or (not quadratic and rtol < SCOUT_RTOL)  # a pass that can end the solve
        if final and scouting and iteration > 1:  # float64 takes over: the scouts' steps bound nothing
            step_before, before = np.inf, None
        scouting = not final
        sums = BrierSums(shifted, beta, quadratic=quadratic and near) if final else scouted(shifted, beta)
        step = _halley_step(sums)
        if step is None or not (lo < beta - step < hi and _settles(step, step_before)):
            return None
        if abs(step) <= rtol * beta:
            if final or not quadratic:
                return beta - step, sums, -step, iteration
            near, beta = True, beta - step  # a scout's step, taken: a float64 pass at its end decides
            continue
        near = abs(step) <= NEAR * beta and _halley_error(sums, step) <= rtol * beta
        root = None if before is None else hermite_root(before, sums, beta - step)
        if root is not None and lo < root < hi and abs(root - (beta - step)) <= 0.5 * abs(step):
            # Halley's error is about the correction; Hermite's about that times e0^3
            near = near or abs(root - (beta - step)) * abs(step_before / beta) ** 3 <= HERMITE_MARGIN * rtol * beta
            step = beta - root
        step_before, before = step, sums
        beta -= step
    return None


def _halley_error(sums: BrierSums, step: float) -> float:
    """The error a Halley ``step`` leaves: about ``(L''' / (2 L''))^2 step^3`` (its constant without the L'''' term)."""
    return (sums.third / (2.0 * sums.curvature)) ** 2 * abs(step) ** 3


def _settles(step: float, step_before: float) -> bool:
    """A step at most half the one before, or, on the same side (still approaching the root
    from one side, as in a flat stretch of the Brier curve), at most ``GROWTH`` times it."""
    return abs(step) <= 0.5 * abs(step_before) or (step * step_before > 0 and abs(step) <= GROWTH * abs(step_before))


def subsample_rows(shifted: ShiftedLogits, rows: int, least: int) -> int:
    """Rows of a subsample of ``rows * ENTRY_CLASSES`` entries (at most ``rows``, at least ``least``)."""
    return max(least, min(rows, rows * ENTRY_CLASSES // shifted.k))


def is_large(shifted: ShiftedLogits) -> bool:
    """Whether the Brier temperature is solved from subsamples (else on the full-data grid)."""
    return shifted.n > 4 * WARM_START_ROWS or shifted.n * shifted.k > 4 * WARM_START_ROWS * ENTRY_CLASSES


def warm_brier_beta(shifted: ShiftedLogits) -> float | None:
    """The Brier-optimal inverse temperature from a subsample's basin: the minimum of
    ``GRID_FACTORS`` around the NLL-optimal temperature of a coarse subsample, refined by Halley's
    method on a warm-start subsample where that is at most a quarter of the rows (from the coarse
    NLL-optimal temperature where a safeguard stops it from the grid's minimum: on 65 rows the
    grid's minimum can lie where the Brier curve of more rows is concave)."""
    coarse = shifted.subsample(subsample_rows(shifted, COARSE_ROWS, MIN_COARSE_ROWS))
    try:
        centre, _ = solve_nll_temperature(coarse)
        grid, _, best = grid_minimum(lambda t: scouted(coarse, 1.0 / t, loss_only=True).loss, centre)
    except ValueError:
        return None
    warm_rows = subsample_rows(shifted, WARM_START_ROWS, MIN_WARM_ROWS)
    if 4 * warm_rows > shifted.n:
        return 1.0 / grid[best]
    warm = shifted.subsample(warm_rows)
    solved = halley_brier(warm, 1.0 / grid[best], rtol=WARM_RTOL) or halley_brier(warm, 1.0 / centre, rtol=WARM_RTOL)
    return None if solved is None else solved[0]


def fit_brier_temperature(shifted: ShiftedLogits):
    """``(T, diagnostics, (sums, delta) or None)``: Halley's method from a subsample's basin on
    large host inputs (``is_large``), else ``solve_brier_temperature`` (then no sums)."""
    if not isinstance(shifted, DeviceShiftedLogits) and is_large(shifted):
        warm = warm_brier_beta(shifted)
        solved = None if warm is None else halley_brier(shifted, warm, STEP_TOLERANCE, quadratic=True)
        if solved is not None:
            beta, sums, delta, iterations = solved
            return 1.0 / float(beta), FitDiagnostics(  # plain floats: parameters are stored as JSON
                converged=True,
                iterations=iterations,
                message="Halley's method on the Brier slope from a subsample's basin (gradient and "
                        "objective at the iterate before the last step)",
                gradient_norm=float(abs(sums.slope)),
                objective=float(sums.loss),
            ), (sums, delta)
    t, diagnostics = solve_brier_temperature(shifted)
    return t, diagnostics, None
