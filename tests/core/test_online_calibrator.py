"""``online_platt`` and ``online_temperature``: the Online Newton Step checked by hand, a fit followed
by updates equal to one stream, calibeating by tracking, the online temperature meeting the batch
fit on stationary real streams, and stored parameters read back exactly (or refused)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import calibration as cal
from calibration.online import OnlinePlattScaling, TrackingCalibeater
from calibration.online_temperature import OnlineTemperatureScaling
from tests.helpers import load_split


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def test_the_first_steps_are_the_online_newton_step_solved_with_numpy():
    s, y = np.array([2.0, -1.0, 0.5]), np.array([1, 1, 0])
    model = cal.create("online_platt", {"input": "scores", "gamma": 0.5, "epsilon": 2.0}).fit(s[:2], y[:2])
    theta, matrix = np.array([1.0, 0.0]), 2.0 * np.eye(2)
    for score, label in zip(s[:2], y[:2], strict=True):
        z = np.array([score, 1.0])
        g = (_sigmoid(theta @ z) - label) * z
        matrix += np.outer(g, g)
        theta = theta - (1 / 0.5) * np.linalg.solve(matrix, g)  # inside the radius: no projection
    summary = model.summary()
    assert [summary["slope"], summary["intercept"]] == pytest.approx(theta, rel=1e-14)
    forecast = model.update_batch(cal.validate_inputs(s[2:], "scores"), y[2:])[:, 1]
    assert forecast[0] == pytest.approx(_sigmoid(theta @ np.array([0.5, 1.0])), rel=1e-14)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 60), st.integers(1, 60), st.integers(0, 2**31 - 1))
def test_a_fit_then_updates_is_one_stream(n_fit, n_more, seed):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n_fit + n_more) * 4
    y = (rng.random(n_fit + n_more) < _sigmoid(0.6 * s - 0.4)).astype(int)
    model = cal.create("online_platt", {"input": "scores", "calibeating": "tracking"}).fit(s[:n_fit], y[:n_fit])
    served = model.update_batch(cal.validate_inputs(s[n_fit:], "scores"), y[n_fit:])[:, 1]
    ops, tracker = OnlinePlattScaling(), TrackingCalibeater(10)
    forecasts = ops.predict_update(s, y)
    beaten = tracker.predict_update(forecasts, y)
    np.testing.assert_array_equal(served, beaten[n_fit:])
    assert (model.summary()["slope"], model.summary()["intercept"]) == ops.coef_
    assert model.n_samples_ == n_fit + n_more
    again = cal.from_dict(model.to_dict())
    probe = rng.normal(size=50) * 4
    np.testing.assert_array_equal(again.predict_proba(probe), model.predict_proba(probe))


def test_tracking_serves_the_bin_s_label_mean_and_logits_give_the_same_map_as_scores():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(400, 2)) * 2
    y = (rng.random(400) < _sigmoid(logits[:, 1] - logits[:, 0])).astype(int)
    by_logits = cal.create("online_platt", {"calibeating": "tracking", "n_bins": 4}).fit(logits, y)
    by_scores = cal.create("online_platt", {"input": "scores", "calibeating": "tracking", "n_bins": 4})
    by_scores.fit(logits[:, 1] - logits[:, 0], y)
    np.testing.assert_array_equal(by_logits.predict_proba(logits),
                                  by_scores.predict_proba(logits[:, 1] - logits[:, 0]))
    q = by_logits.ops_.predict_proba(logits[:, 1] - logits[:, 0])
    bins = np.clip(np.ceil(q * 4).astype(int) - 1, 0, 3)
    params = by_logits.to_dict()["params"]
    expected = np.array(params["bin_positives"])[bins] / np.array(params["bin_counts"])[bins]
    np.testing.assert_allclose(by_logits.predict_proba(logits)[:, 1], expected, rtol=1e-15)
    assert sum(params["bin_counts"]) == 400 and sum(params["bin_positives"]) == y.sum()


def test_multiclass_inputs_and_bad_stored_parameters_are_refused():
    with pytest.raises(ValueError, match="binary only"):
        cal.create("online_platt").fit(np.random.default_rng(0).normal(size=(20, 3)), np.arange(20) % 3)
    model = cal.create("online_platt", {"input": "scores"}).fit(np.array([1.0, -1.0, 2.0]), np.array([1, 0, 1]))
    stored = model.to_dict()
    for key, value in (("newton_matrix", [1.0, 2.0, 1.0]), ("bin_positives", [5] + [0] * 9),
                       ("slope", float("nan"))):
        broken = {**stored, "params": {**stored["params"], key: value}}
        with pytest.raises(ValueError):
            cal.from_dict(broken)


# -- online_temperature ------------------------------------------------------------------------


def _log_loss(beta: float, row: np.ndarray, label: int) -> float:
    scaled = beta * row
    return float(np.log(np.sum(np.exp(scaled - scaled.max()))) + scaled.max() - scaled[label])


def test_online_temperature_steps_with_a_finite_difference_gradient():
    rng = np.random.default_rng(3)
    z, y = rng.normal(size=(3, 5)) * 3, np.array([1, 4, 0])
    model = cal.create("online_temperature", {"gamma": 0.5, "epsilon": 2.0}).fit(z[:2], y[:2])
    beta, newton = 1.0, 2.0
    for row, label in zip(z[:2], y[:2], strict=True):
        h = 1e-6
        g = (_log_loss(beta + h, row, label) - _log_loss(beta - h, row, label)) / (2 * h)
        newton += g * g
        beta = beta - g / (0.5 * newton)
    assert model.summary()["inverse_temperature"] == pytest.approx(beta, rel=1e-8)
    forecast = model.update_batch(cal.validate_inputs(z[2:], "logits"), y[2:])
    np.testing.assert_allclose(forecast[0], cal.softmax(beta * z[2:])[0], rtol=1e-8)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 40), st.integers(1, 40), st.integers(2, 6), st.integers(0, 2**31 - 1))
def test_online_temperature_fit_then_updates_is_one_stream_and_keeps_the_argmax(n_fit, n_more, k, seed):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n_fit + n_more, k)) * rng.uniform(0.1, 20)
    y = rng.integers(0, k, n_fit + n_more)
    model = cal.create("online_temperature").fit(z[:n_fit], y[:n_fit])
    served = model.update_batch(cal.validate_inputs(z[n_fit:], "logits"), y[n_fit:])
    stream = cal.create("online_temperature").fit(z, y)
    assert model.summary() == stream.summary()
    whole = OnlineTemperatureScaling()
    np.testing.assert_array_equal(served, whole.predict_update(z, y)[n_fit:])
    assert 0.01 <= model.summary()["inverse_temperature"] <= 100
    np.testing.assert_array_equal(model.predict_proba(z).argmax(1), z.argmax(1))
    np.testing.assert_array_equal(cal.from_dict(model.to_dict()).predict_proba(z), model.predict_proba(z))


@pytest.mark.parametrize("name", ["cifar10_resnet50_cross_entropy", "cifar100_densenet-bc-100", "cifar10_lenet5"])
def test_on_a_stationary_real_stream_the_online_temperature_meets_the_batch_fit(name):
    """20000 rows with no drift: ONS's regret is O(log T), so its last temperature is the batch
    maximum-likelihood one to within a few percent."""
    kind, val, val_labels = load_split(name, "val")
    _, test, test_labels = load_split(name, "test")
    z, y = np.concatenate([val, test]), np.concatenate([val_labels, test_labels])
    online = cal.create("online_temperature", {"input": kind}).fit(z, y).temperature_
    batch = cal.create("temperature", {"input": kind}).fit(z, y).temperature_
    assert online == pytest.approx(batch, rel=0.05)


def test_online_temperature_refuses_stored_values_outside_its_bounds():
    model = cal.create("online_temperature").fit(np.eye(3) * 2, np.arange(3))
    stored = model.to_dict()
    for key, value in (("inverse_temperature", 1e3), ("inverse_temperature", -1.0), ("newton", 0.0)):
        with pytest.raises(ValueError):
            cal.from_dict({**stored, "params": {**stored["params"], key: value}})
    with pytest.raises(ValueError, match="beta_min"):
        cal.create("online_temperature", {"beta_min": 2.0})
