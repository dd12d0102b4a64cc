"""ETS's Brier temperature on large inputs: the subsample's warm start lands within
``WARM_DISTANCE`` of the full-data optimum, and from there the solve reads the logits at most three
times (the last pass with ETS's quadratic, in float64; the passes before it scout in float32),
the later steps taken to the root of the two-point Hermite quintic (``hermite_root``), which is
exact for a slope that is a quintic. The scouting passes' sums agree with float64's, and the row
dot products with exact sums."""

import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import calibration as cal
from calibration.methods import brier_temperature, row_dots
from calibration.methods.brier_temperature import (
    WARM_DISTANCE,
    BrierSums,
    hermite_root,
    scouted,
    warm_brier_beta,
)
from calibration.methods.ensemble_temperature import simplex_quadratic_minimum
from calibration.methods.row_dots import padded_width, row_products
from calibration.methods.shifted_logits import ShiftedLogits
from tests.helpers import drawn_set


def counted_passes(monkeypatch, n):
    """The real ``BrierSums``, recording ``(beta, quadratic, scout)`` of each pass over all ``n`` rows."""
    passes = []

    class Counted(BrierSums):
        def __init__(self, shifted, beta, quadratic=False, loss_only=False, scout=False):
            super().__init__(shifted, beta, quadratic, loss_only, scout)
            if shifted.n == n:
                passes.append((beta, quadratic, scout))

    monkeypatch.setattr(brier_temperature, "BrierSums", Counted)
    return passes


# many rows of few classes (warm Halley on 4096 rows) and 16000 classes (on 275 rows), seeded; with
# seed 1 the coarse grid's minimum lies where the curve is concave, with 2 a step grows on one side;
# 1100x16000 seed 1: a scout's step of 4.3e-3 left 1.0e-6 (Halley's K ~12, predicted from L''' and
# L''), and on an AVX2 machine's BLAS a later scout's step of 9.5e-7 was not taken: the float64 pass
# at the same iterate saw 1.01e-6 and a second one took the quadratic
@pytest.mark.parametrize(("n", "k", "seed"), [(20000, 50, 0), (20000, 50, 1), (1100, 16000, 0), (1100, 16000, 1),
                                              (1100, 16000, 2)])
def test_the_warm_start_is_near_the_optimum_and_the_solve_reads_the_logits_at_most_three_times(monkeypatch, n, k, seed):
    logits, labels = drawn_set(n, k, seed)
    shifted = ShiftedLogits(logits, labels)
    warm = warm_brier_beta(shifted)
    passes = counted_passes(monkeypatch, n)
    ets = cal.EnsembleTemperatureScaling().fit(logits, labels)
    assert "Halley" in ets.diagnostics_.message
    beta = 1 / ets.temperature_
    assert abs(BrierSums(shifted, beta).slope) < 1e-12  # the full-data root, not the subsample's
    assert warm is not None and abs(warm / beta - 1) <= WARM_DISTANCE
    assert 2 <= len(passes) <= 3 and [q for _, q, _ in passes].count(True) == 1 and passes[-1][1]
    # every pass before the last scouts in float32; the last, which ends the solve, is float64
    assert [scout for *_, scout in passes] == [True] * (len(passes) - 1) + [False]
    gram, linear = BrierSums(shifted, beta, quadratic=True).quadratic()
    np.testing.assert_allclose(ets.weights_, simplex_quadratic_minimum(gram, linear), rtol=0, atol=1e-12)


def at(beta, coefficients):
    """A stand-in for ``BrierSums`` whose slope is the polynomial ``coefficients`` (lowest first)."""
    slope = np.polynomial.Polynomial(coefficients)
    return SimpleNamespace(beta=beta, slope=slope(beta), curvature=slope.deriv()(beta), third=slope.deriv(2)(beta))


def test_the_hermite_root_of_a_quintic_slope_is_exact():
    root = 0.5
    quintic = np.polynomial.Polynomial.fromroots([root, -1.0, 2.0, 3.0, -4.0]).coef
    found = hermite_root(at(0.44, quintic), at(0.49, quintic), 0.49)
    assert found == pytest.approx(root, rel=1e-13)


def test_the_hermite_root_improves_on_halley_by_the_cube_of_the_first_error():
    """On a slope that is no polynomial (``tanh``), from 15% off: Halley from the second iterate
    leaves ``K e1^3``, the two-point quintic about ``e0^3`` times that."""
    root, scale = 0.5, 3.0
    def sums(beta):
        t = np.tanh(scale * (beta - root))
        return SimpleNamespace(beta=beta, slope=t, curvature=scale * (1 - t * t),
                               third=-2 * scale * scale * t * (1 - t * t))
    first = sums(0.575)
    halley = brier_temperature._halley_step
    second = sums(first.beta - halley(first))
    halley_error = abs(second.beta - halley(second) - root)
    hermite_error = abs(hermite_root(first, second, second.beta - halley(second)) - root)
    assert 0 < hermite_error <= 0.15 ** 3 * halley_error


@pytest.mark.parametrize(("n", "k"), [(40, 50257), (300, 1000), (2000, 20)])
@pytest.mark.parametrize("offset", [0.7, 0.95, 1.3])
def test_a_scouting_pass_agrees_with_float64(n, k, offset):
    """float32 sums (pieces of 512 entries for dot products, pairwise row sums) against float64's,
    away from the root, where the scouts' steps are taken: the loss to 1e-7 relative, and the
    slope, curvature and third derivative each to a few float32 ulps of the three's scale (a
    derivative that cancels, as the curvature near an inflection, keeps that absolute error)."""
    logits, labels = drawn_set(n, k, seed=3)
    shifted = ShiftedLogits(logits, labels)
    beta = offset / 2.0
    exact, scout = BrierSums(shifted, beta), scouted(shifted, beta)
    assert scout.loss == pytest.approx(exact.loss, rel=1e-7)
    scale = abs(exact.slope) + abs(exact.curvature) + abs(exact.third)
    for name in ("slope", "curvature", "third"):
        assert abs(getattr(scout, name) - getattr(exact, name)) <= 2e-6 * scale, name


@pytest.mark.parametrize("mask", [np.float64(-1e39), np.float32(-3.4e38), np.float32(-1e30)])
def test_masked_entries_beyond_float32s_range_are_floored_in_the_scouts(mask):
    """Masked entries (-1e39 in float64 logits, float32's lowest, -1e30) are ``-inf`` or square to
    ``inf`` in float32 (``0 * inf`` is NaN): the scouts floor ``d`` where ``exp`` is 0 either way,
    agree with float64's sums, warn of nothing, and the fit ends by Halley's method at the root
    (a NaN scout sent it to the full-data grid)."""
    logits, labels = drawn_set(1000, 17000, seed=4)  # over 4 * 4096 * 1000 entries: Halley from subsamples
    logits = logits.astype(mask.dtype)
    logits[::7, 11] = mask
    labels[::7] = np.where(labels[::7] == 11, 12, labels[::7])
    shifted = ShiftedLogits(logits, labels)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = scouted(shifted, 0.5)
        ets = cal.EnsembleTemperatureScaling().fit(logits, labels)
    exact = BrierSums(shifted, 0.5)
    assert found.loss == pytest.approx(exact.loss, rel=1e-7)
    scale = abs(exact.slope) + abs(exact.curvature) + abs(exact.third)
    for name in ("slope", "curvature", "third"):
        assert abs(getattr(found, name) - getattr(exact, name)) <= 2e-6 * scale, name
    assert "Halley" in ets.diagnostics_.message
    assert abs(BrierSums(shifted, 1 / ets.temperature_).slope) < 1e-12


@pytest.mark.parametrize("ones", [False, True])
@pytest.mark.parametrize("blas", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("rows", "k"), [(1, 1), (3, 7), (4, 32), (2, 33), (2, 512), (2, 513), (1, 8192), (1, 8193),
                                         (1, 50257), (5, 20011)])
def test_row_products_equal_exact_sums(monkeypatch, ones, blas, dtype, rows, k):
    """``row_products`` of 3 vectors with 4, each pair (rows padded to ``padded_width`` with zeros:
    ``einsum`` up to 32 entries, then BLAS pieces of 8192 float64 or 512 float32 entries, or
    ``vecdot`` dots in pieces of 8192 for float64 of at most ``ROW_DOT_PAIRS`` pairs, as on CPUs
    without AVX-512) against
    ``math.fsum`` of the exact products, for lengths at, around and between the pieces; a width
    that is not a ``padded_width`` is refused on either path. With ``ones``, the first vector
    of each side is all ones and named so (its pairs row sums where dots are ``vecdot``'s)."""
    monkeypatch.setattr(row_dots, "ROW_DOT_PAIRS", 0 if blas else 12)
    rng = np.random.default_rng(k)
    width = padded_width(k, dtype)
    vectors = np.zeros((4, rows, width), dtype)
    vectors[:, :, :k] = rng.standard_normal((4, rows, k))
    if ones:
        vectors[:2, :, :k] = 1.0
    pairs = [(i, j) for i in range(3) for j in range(4)][::-1]
    found = np.full((rows, 12), np.nan)
    row_products(vectors[1:], vectors, pairs, out=found, ones=(0, 0) if ones else (None, None))
    for slot, (i, j) in enumerate(pairs):
        for r in range(rows):
            terms = [x * y for x, y in zip(vectors[1 + i, r].tolist(), vectors[j, r].tolist(), strict=True)]
            exact, scale = math.fsum(terms), math.fsum(map(abs, terms))  # float32 products are exact in float64
            assert abs(found[r, slot] - exact) <= (1e-14 if dtype == np.float64 else 2e-6) * scale
    if width > (8192 if dtype == np.float64 else 512):
        with pytest.raises(ValueError, match="padded_width"):
            row_products(vectors[1:, :, :-1], vectors[:, :, :-1], pairs, out=found)
