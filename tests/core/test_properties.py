"""Properties of every method, checked with hypothesis on random inputs (ties included)."""

import json
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import calibration as cal
from tests.helpers import make_reference_input

FIT_LOGITS, FIT_LABELS = make_reference_input(n=600, k=4, seed=3)

CONFIGS = {
    "temperature": {},
    "temperature-brier": {"objective": "brier"},
    "temperature-ece": {"objective": "ece"},
    "expectation_consistency": {},
    "expectation_consistency-top2": {"top_n": 2},
    "ensemble_temperature": {},
    "ensemble_temperature-nll": {"loss": "nll"},
    "vector": {},
    "matrix": {"off_diagonal_l2": 0.01},
    "dirichlet": {"off_diagonal_l2": 0.01, "bias_l2": 0.01},
    "platt": {},
    "class_temperature": {},
    "isotonic_multiclass": {},
    "isotonic_one_vs_all": {},
    "histogram_binning": {},
    "histogram_binning-quantile": {"strategy": "quantile", "n_bins": 5},
    "composition-irova-ts": {"steps": [{"method": "temperature"}, {"method": "isotonic_one_vs_all"}]},
    "composition-irm-ets": {"steps": [{"method": "ensemble_temperature"},
                                      {"method": "isotonic_multiclass"}]},
    "composition-irm-ts": {"steps": [{"method": "temperature"}, {"method": "isotonic_multiclass"}]},
}


def fitted(config: str) -> cal.Calibrator:
    method = config.split("-")[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cal.ConvergenceWarning)
        return cal.create(method, CONFIGS[config]).fit(FIT_LOGITS, FIT_LABELS)


FITTED = {name: fitted(name) for name in CONFIGS}
PRESERVING = [name for name, c in FITTED.items() if c.accuracy_preserving]

# logits drawn from a few values (many ties) or from a wide range (near-ties, large values)
values = st.one_of(
    st.sampled_from([-3.0, 0.0, 0.0, 1.0, 2.5, 2.5]),
    st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False),
)
logit_batches = st.integers(1, 12).flatmap(lambda n: arrays(np.float64, (n, 4), elements=values))


def test_accuracy_preserving_methods_are_the_declared_ones():
    assert set(PRESERVING) == {
        "temperature", "temperature-brier", "temperature-ece", "expectation_consistency",
        "expectation_consistency-top2", "ensemble_temperature", "ensemble_temperature-nll",
        "class_temperature", "isotonic_multiclass", "composition-irm-ets", "composition-irm-ts",
    }
    assert not FITTED["composition-irova-ts"].accuracy_preserving


@pytest.mark.parametrize("config", PRESERVING)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logits=logit_batches)
def test_accuracy_preserving_methods_never_change_an_argmax(config, logits):
    calibrator = FITTED[config]
    probs = calibrator.predict_proba(logits)
    top = logits.argmax(axis=1)
    np.testing.assert_array_equal(calibrator.predict(logits), top)
    # no class gets a strictly higher probability than the input's top class
    assert np.all(probs[np.arange(len(top)), top] == probs.max(axis=1))


@pytest.mark.parametrize("config", list(CONFIGS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logits=logit_batches)
def test_every_output_row_is_a_probability_vector(config, logits):
    probs = FITTED[config].predict_proba(logits)
    assert probs.shape == logits.shape
    assert np.all(probs >= 0)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_to_dict_is_json_and_round_trips_bit_for_bit(config):
    calibrator = FITTED[config]
    data = json.loads(json.dumps(calibrator.to_dict(), allow_nan=False))
    assert data["format_version"] == 1 and data["method"] == calibrator.method
    restored = cal.from_dict(data)
    probe = make_reference_input(n=300, k=4, seed=11)[0] * 1.7
    assert np.array_equal(restored.predict_proba(probe), calibrator.predict_proba(probe))
    assert restored.to_dict()["params"] == data["params"]


@settings(max_examples=40, deadline=None)
@given(
    logits=st.integers(3, 40).flatmap(
        lambda n: arrays(np.float64, (n, 3), elements=st.floats(-20, 20, allow_nan=False))
    ),
    seed=st.integers(0, 2**16),
)
def test_temperature_fit_on_random_data_is_optimal_or_refused(logits, seed):
    labels = np.random.default_rng(seed).integers(0, 3, len(logits))
    try:
        ts = cal.TemperatureScaling().fit(logits, labels)
    except ValueError as exc:
        assert "no finite optimum" in str(exc) or "outside [1e-6, 1e6]" in str(exc)
        return
    t = ts.temperature_

    def nll(temperature):
        return cal.nll(cal.softmax(logits / temperature), labels)

    assert nll(t) <= min(nll(t * 1.001), nll(t / 1.001)) + 1e-12


@settings(max_examples=30, deadline=None)
@given(scale=st.sampled_from([0.01, 0.1, 10.0, 100.0]))
def test_extreme_temperatures_are_reached(scale):
    """Logits that need T = 0.01 or T = 100 get it (no bracket at 0.05 or 5)."""
    logits, labels = make_reference_input(n=2000, k=5, seed=1)
    # labels drawn at T = 2 from logits; scaling the logits by c moves the optimum to 2c
    fitted_t = cal.TemperatureScaling().fit(logits * scale, labels).temperature_
    base_t = cal.TemperatureScaling().fit(logits, labels).temperature_
    assert fitted_t == pytest.approx(base_t * scale, rel=1e-9)


def test_huge_logits_do_not_overflow():
    logits, labels = make_reference_input(n=2000, k=5, seed=2)
    big = logits / np.abs(logits).max() * 1e4
    for method in ["temperature", "expectation_consistency", "ensemble_temperature"]:
        probs = cal.create(method).fit(big, labels).predict_proba(big)
        assert np.isfinite(probs).all()
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-12)
