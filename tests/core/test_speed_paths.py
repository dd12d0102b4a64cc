"""Issue #23 item 6: the fast paths of the temperature fits give the slow paths' answers.

EC counts top-N hits and top ties in one blocked pass (was n x k boolean temporaries).

ETS solves for T by Halley's method from a subsample's basin on
more than 16384 rows (``calibration.methods.brier_temperature``) and ETS takes its quadratic from
blocked sums; these must agree with the full-data grid and with the quadratic formed from the
materialised components, and ETS must not allocate n x k arrays beyond the float64 logits."""

import tracemalloc

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import calibration as cal
from calibration.methods.brier_temperature import BrierSums, fit_brier_temperature
from calibration.methods.ensemble_temperature import label_probabilities, simplex_quadratic_minimum
from calibration.methods.expectation_consistency import top_n_hits_and_top_ties
from calibration.methods.shifted_logits import ShiftedLogits
from calibration.methods.temperature import solve_brier_temperature
from calibration.metrics.scores import label_ranks
from tests.helpers import make_reference_input


def large_set(n=20000, k=50, seed=3, temperature=2.0):
    rng = np.random.default_rng(seed)
    logits = 3.0 * rng.standard_normal((n, k))
    p = cal.softmax(logits / temperature)
    labels = np.minimum((p.cumsum(axis=1) < rng.random(n)[:, None]).sum(axis=1), k - 1)
    return logits, labels


@pytest.mark.parametrize("temperature", [0.5, 2.0, 6.0])
def test_halley_from_a_subsample_finds_the_grids_brier_temperature(temperature):
    logits, labels = large_set(temperature=temperature)
    shifted = ShiftedLogits(logits, labels)
    t_fast, diagnostics, newton = fit_brier_temperature(shifted)
    t_grid, _ = solve_brier_temperature(shifted)
    assert newton is not None and diagnostics.converged and "Halley" in diagnostics.message
    assert t_fast == pytest.approx(t_grid, rel=1e-12)
    assert abs(BrierSums(shifted, 1 / t_fast).slope) < 1e-12
    assert cal.EnsembleTemperatureScaling().fit(logits, labels).temperature_ == t_fast


def test_brier_derivatives_match_finite_differences():
    logits, labels = make_reference_input(n=3000, k=20)
    shifted = ShiftedLogits(logits, labels)
    beta, h = 0.6, 1e-5
    at, up, down = (BrierSums(shifted, b) for b in (beta, beta + h, beta - h))
    assert at.slope == pytest.approx((up.loss - down.loss) / (2 * h), rel=1e-7)
    assert at.curvature == pytest.approx((up.slope - down.slope) / (2 * h), rel=1e-7)
    assert at.third == pytest.approx((up.curvature - down.curvature) / (2 * h), rel=1e-6)
    assert BrierSums(shifted, beta, loss_only=True).loss == at.loss


def materialised_quadratic(logits, labels, temperature):
    rows = np.arange(len(labels))
    comps = [cal.softmax(logits / temperature), cal.softmax(logits)]
    gram = np.full((3, 3), 1.0 / logits.shape[1])
    for i in range(2):
        for j in range(2):
            gram[i, j] = np.mean(np.einsum("ij,ij->i", comps[i], comps[j]))
    linear = np.array([comps[0][rows, labels].mean(), comps[1][rows, labels].mean(), 1.0 / logits.shape[1]])
    return gram, linear


def test_ets_weights_from_blocked_sums_equal_those_of_the_components():
    logits, labels = large_set(temperature=3.0)
    ets = cal.EnsembleTemperatureScaling().fit(logits, labels)
    assert "Halley" in ets.diagnostics_.message
    gram, linear = materialised_quadratic(logits, labels, ets.temperature_)
    np.testing.assert_allclose(ets.weights_, simplex_quadratic_minimum(gram, linear), rtol=0, atol=1e-12)
    # the Taylor step of the quadratic from the last iterate is exact to O(delta^2)
    shifted = ShiftedLogits(logits, labels)
    sums = BrierSums(shifted, 1 / ets.temperature_ - 1e-7, quadratic=True)
    taylor_gram, taylor_linear = sums.quadratic(1e-7)
    np.testing.assert_allclose(taylor_gram, gram, rtol=1e-12)
    np.testing.assert_allclose(taylor_linear, linear, rtol=1e-12)


def test_ets_nll_label_components_without_the_matrices():
    logits, labels = make_reference_input(n=4000, k=10)
    rows = np.arange(len(labels))
    blocked = label_probabilities(ShiftedLogits(logits, labels), 0.4)
    np.testing.assert_allclose(blocked[0], cal.softmax(logits * 0.4)[rows, labels], rtol=1e-14)
    np.testing.assert_allclose(blocked[1], cal.softmax(logits)[rows, labels], rtol=1e-14)


def test_ets_peak_memory_is_the_float64_copy_and_blocks():
    rng = np.random.default_rng(0)
    logits = (3.0 * rng.standard_normal((20000, 300))).astype(np.float32)
    labels = rng.integers(0, 300, 20000)
    labels[: 10000] = logits[: 10000].argmax(axis=1)
    cal.EnsembleTemperatureScaling().fit(logits, labels)
    tracemalloc.start()
    cal.EnsembleTemperatureScaling().fit(logits, labels)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak <= 2.5 * logits.nbytes  # the float64 copy is 2x


def test_ec_hits_and_ties_in_one_blocked_pass():
    rng = np.random.default_rng(5)
    logits = np.round(rng.standard_normal((20000, 40)), 1)  # many ties, at the top and at labels
    labels = rng.integers(0, 40, 20000)
    shifted = ShiftedLogits(logits, labels)
    for top_n in (1, 3):
        hits, ties = top_n_hits_and_top_ties(shifted, top_n)
        np.testing.assert_array_equal(hits, label_ranks(logits, labels) < top_n)
        np.testing.assert_array_equal(ties, shifted.count_top_ties())
    assert np.any(ties > 1) and np.any(hits & (ties > 1))
    ec = cal.ExpectationConsistency().fit(logits, labels)
    probs = ec.predict_proba(logits)
    assert cal.mean_confidence(probs) == pytest.approx(np.mean(label_ranks(logits, labels) == 0), abs=1e-12)


def test_a_failed_safeguard_falls_back_to_the_full_grid(monkeypatch):
    logits, labels = large_set(temperature=2.0)
    fast = cal.EnsembleTemperatureScaling().fit(logits, labels)
    monkeypatch.setattr("calibration.methods.brier_temperature.halley_brier", lambda *a, **k: None)
    slow = cal.EnsembleTemperatureScaling().fit(logits, labels)
    assert "Halley" not in slow.diagnostics_.message and slow.diagnostics_.converged
    assert slow.temperature_ == pytest.approx(fast.temperature_, rel=1e-12)
    np.testing.assert_allclose(slow.weights_, fast.weights_, rtol=0, atol=1e-12)


@pytest.mark.parametrize("method", ["ensemble_temperature", "temperature", "expectation_consistency"])
def test_fits_on_the_fast_paths_store_plain_json_and_read_back_exactly(method):
    """The Halley path returned numpy scalars: ETS's stored temperature was a ``numpy.float64``,
    which orjson refuses, so an ``auto`` job on 50000 x 1000 that chose ETS failed as it stored."""
    logits, labels = large_set()
    fitted = cal.create(method, {"objective": "brier"} if method == "temperature" else {}).fit(logits, labels)
    stored = orjson.loads(orjson.dumps(fitted.to_dict()))
    np.testing.assert_array_equal(cal.from_dict(stored).predict_proba(logits[:100]), fitted.predict_proba(logits[:100]))


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 40), st.integers(2, 30), st.integers(0, 2**32 - 1), st.floats(0.05, 20.0))
def test_serving_float32_logits_unwidened_gives_the_widened_answer_bit_for_bit(n, k, seed, temperature):
    """Temperature scaling widens and divides float32 logits in one pass when nothing has widened
    them yet; the answer is the one computed from the float64 copy."""
    rng = np.random.default_rng(seed)
    logits = (5 * rng.standard_normal((n, k))).astype(np.float32)
    model = cal.TemperatureScaling()
    model.temperature_, model.n_classes_ = temperature, k
    fresh = cal.validate_inputs(logits, "logits")
    widened = cal.validate_inputs(logits, "logits")
    widened.logits  # noqa: B018  (the float64 copy made first)
    np.testing.assert_array_equal(model.predict_batch(fresh), model.predict_batch(widened))
    assert "logits" not in fresh.__dict__


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 8), st.integers(2, 2000), st.integers(0, 2**32 - 1), st.booleans())
def test_the_lookalike_check_of_float32_input_is_the_check_of_its_float64_widening(n, k, seed, softmax_rows):
    rng = np.random.default_rng(seed)
    x = rng.dirichlet(np.ones(k), size=n) if softmax_rows else rng.standard_normal((n, k))
    x32 = x.astype(np.float32)
    assert cal.looks_like_probabilities(x32) == cal.looks_like_probabilities(x32.astype(np.float64))
