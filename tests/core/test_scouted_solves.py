"""Solves whose early steps are taken on float32 passes (``solvers.increasing_root``'s scout):
the scout never ends a solve, a scout whose sign is wrong near the root does not move the root,
and temperature scaling and expectation consistency find the float64 solve's temperature while
reading the logits in float64 once."""

import math
import warnings
from functools import partial

import numpy as np
import pytest

import calibration as cal
from calibration.methods import shifted_logits
from calibration.methods.shifted_logits import ShiftedLogits
from calibration.methods.temperature import BETA_LIMITS
from calibration.solvers import SCOUT_STEP, increasing_root
from tests.helpers import drawn_set


def logistic(x, root=0.37):
    """An increasing function with its first two derivatives (no polynomial: Halley is not exact)."""
    t = math.tanh(3.0 * math.log(x / root))
    return t, 3.0 * (1 - t * t) / x, 3.0 * (1 - t * t) * (-6.0 * t - 1.0) / (x * x)


def counted(f, calls):
    def wrapped(x):
        calls.append(x)
        return f(x)
    return wrapped


@pytest.mark.parametrize("bias", [0.0, 1e-7, -1e-7, 1e-6, 2e-2, -2e-2, 9e-2])
def test_the_root_is_gs_whatever_the_scouts_error(bias):
    """A scout off by ``bias`` (its own root about ``bias / 3`` away relative, its sign wrong between
    the two) takes the early steps; g ends the solve at its own root, in at most three evaluations
    (2e-2 and 9e-2 are far beyond a float32 pass's ~1e-6; with the scouts' steps still bounding
    g's, 9e-2 took 12: g's first step failed the halving test and bisected)."""
    g_calls, scout_calls = [], []
    scout = counted(lambda x: (logistic(x)[0] + bias, *logistic(x)[1:]), scout_calls)
    found = increasing_root(counted(logistic, g_calls), 5.0, *BETA_LIMITS, scout=scout)
    plain = increasing_root(logistic, 5.0, *BETA_LIMITS)
    assert found.converged and plain.converged
    assert found.x == pytest.approx(0.37, rel=1e-15) and found.x == pytest.approx(plain.x, rel=1e-15)
    assert len(scout_calls) >= 2 and 1 <= len(g_calls) <= 3
    assert abs(g_calls[0] / 0.37 - 1) <= 10 * SCOUT_STEP + abs(bias)  # g starts where the scouts stopped


def test_a_scout_never_ends_the_solve():
    """The scout equal to g: its last step is below every tolerance, and still g is evaluated."""
    g_calls = []
    found = increasing_root(counted(logistic, g_calls), 0.4, *BETA_LIMITS, scout=logistic)
    assert found.converged and g_calls and found.x == pytest.approx(0.37, rel=1e-15)


def test_a_root_outside_the_bracket_is_reported_with_scouts():
    found = increasing_root(lambda x: logistic(x, root=1e7), 1.0, *BETA_LIMITS,
                            scout=lambda x: logistic(x, root=1e7))
    assert not found.converged and "above" in found.message


def passes(monkeypatch, n):
    """The real ``ShiftedLogits.moments``, recording whether each pass over all ``n`` rows scouted."""
    seen, moments = [], ShiftedLogits.moments

    def recorded(self, beta, order, scout=False):
        if self.n == n:
            seen.append(scout)
        return moments(self, beta, order, scout)

    monkeypatch.setattr(shifted_logits.ShiftedLogits, "moments", recorded)
    return seen


@pytest.mark.parametrize(("n", "k"), [(300, 20000), (20000, 40)])  # one solve from 1, one warm-started
@pytest.mark.parametrize("method", ["temperature", "expectation_consistency", "expectation_consistency top 3"])
def test_fits_end_on_float64_passes_at_the_float64_solves_temperature(monkeypatch, method, n, k):
    """From a cold start the steps are scouted and one float64 pass ends the solve; from a warm
    start (more than 16384 rows: the subsample's solve scouts) the two full passes are float64."""
    logits, labels = drawn_set(n, k)
    top_n = 3 if method.endswith("top 3") else 1
    fit = (cal.TemperatureScaling() if method == "temperature" else cal.ExpectationConsistency(top_n=top_n))
    seen = passes(monkeypatch, n)
    fitted = fit.fit(logits, labels)
    assert fitted.diagnostics_.converged
    if n <= 16384:
        assert seen.count(False) == 1 and seen[-1] is False and seen.count(True) >= 2
    else:
        assert seen == [False, False]
    # the same solve with float64 passes only, from the same start
    shifted = ShiftedLogits(logits, labels)
    if method == "temperature":
        g = shifted.nll_gradient
    else:
        from calibration.methods.expectation_consistency import _TopConfidence, top_n_hits_and_top_ties
        hits, _ = top_n_hits_and_top_ties(shifted, top_n)
        g = _TopConfidence(shifted, top_n, float(np.mean(hits)))
    scouted_root = increasing_root(g, 1.0, *BETA_LIMITS, scout=partial(g, scout=True))
    plain = increasing_root(g, 1.0, *BETA_LIMITS)
    assert scouted_root.x == pytest.approx(plain.x, rel=1e-14)
    assert 1 / fitted.temperature_ == pytest.approx(plain.x, rel=1e-14)
    assert abs(g(1 / fitted.temperature_)[0]) < 1e-12


@pytest.mark.parametrize("mask", [np.float64(-1e39), np.float32(-3.4e38), np.float32(-1e30)])
def test_masked_entries_are_floored_in_the_scouts(mask):
    """Masked entries beyond what float32 can take (``-inf``, or a square that overflows): the
    scouts' moments agree with float64's, nothing warns, and TS ends at the float64 root."""
    logits, labels = drawn_set(200, 300, seed=1)
    logits = logits.astype(mask.dtype)
    logits[::5, 7] = mask
    labels[::5] = np.where(labels[::5] == 7, 8, labels[::5])
    shifted = ShiftedLogits(logits, labels)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = shifted.moments(0.5, 3, scout=True)
        ts = cal.TemperatureScaling().fit(logits, labels)
    for scout, exact in zip(found, shifted.moments(0.5, 3), strict=True):
        np.testing.assert_allclose(scout, exact, rtol=1e-6)
    assert ts.diagnostics_.converged and abs(shifted.nll_gradient(1 / ts.temperature_)[0]) < 1e-12


@pytest.mark.parametrize("offset", [1e9, float(np.float32(1e12)) - 3e4])
def test_float64_logits_far_from_zero_are_scouted_from_their_own_maxima(monkeypatch, offset):
    """float64 logits around 1e9 or 1e12: a float32 pass takes ``d`` in float64, rounded once (the
    float32 rounding of a row's maximum shifted the row by up to 6e-8 of it: 60 at 1e9, and every
    ``e`` underflowed 30000 below it). One float64 pass ends each solve, at the float64 solve's
    temperature, with no warning."""
    rng = np.random.default_rng(0)
    logits = 3.0 * rng.standard_normal((1000, 10))
    labels = (logits / 2 + rng.gumbel(size=logits.shape)).argmax(axis=1)
    logits += offset
    shifted = ShiftedLogits(logits, labels)
    with np.errstate(all="raise"):
        scout_sums = shifted.moments(0.5, 3, scout=True)
    for scout, exact in zip(scout_sums, shifted.moments(0.5, 3), strict=True):
        np.testing.assert_allclose(scout, exact, rtol=1e-6)
    seen = passes(monkeypatch, 1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ts = cal.TemperatureScaling().fit(logits, labels)
    assert seen.count(False) == 1 and seen.count(True) >= 2
    plain = increasing_root(shifted.nll_gradient, 1.0, *BETA_LIMITS)
    assert 1 / ts.temperature_ == pytest.approx(plain.x, rel=1e-14)


def test_float64_masks_beyond_the_square_root_of_float64s_range_leave_the_moments_finite():
    """Entries at -1e200 in float64 logits: ``d^2`` would overflow float64 (``0 * inf`` is NaN where
    ``e d^2`` is 0); the moments take ``e d^2`` times ``d`` instead, so the fits warn of nothing and
    end in a few float64 steps at the root."""
    logits, labels = drawn_set(2000, 100, seed=3)
    logits = logits.astype(np.float64)
    logits[:, 50:60] = -1e200
    labels = np.where((labels >= 50) & (labels < 60), 0, labels)
    shifted = ShiftedLogits(logits, labels)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sums = shifted.moments(0.5, 3)
        ts = cal.TemperatureScaling().fit(logits, labels)
        ets = cal.EnsembleTemperatureScaling(loss="nll").fit(logits, labels)
    assert all(np.isfinite(s).all() for s in sums)
    assert ts.diagnostics_.converged and ts.diagnostics_.iterations <= 6
    assert abs(shifted.nll_gradient(1 / ts.temperature_)[0]) < 1e-12
    assert ets.temperature_ == ts.temperature_  # ETS with the NLL fits T as temperature scaling does
