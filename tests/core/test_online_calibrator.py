"""``online_platt``: the Online Newton Step checked by hand, a fit followed by updates equal to one
stream, calibeating by tracking, and stored parameters read back exactly (or refused)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import calibration as cal
from calibration.online import OnlinePlattScaling, TrackingCalibeater


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
    forecast = model.update_batch(cal.validate_inputs(s[2:], "scores"), y[2:])
    assert forecast[0] == pytest.approx(_sigmoid(theta @ np.array([0.5, 1.0])), rel=1e-14)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 60), st.integers(1, 60), st.integers(0, 2**31 - 1))
def test_a_fit_then_updates_is_one_stream(n_fit, n_more, seed):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n_fit + n_more) * 4
    y = (rng.random(n_fit + n_more) < _sigmoid(0.6 * s - 0.4)).astype(int)
    model = cal.create("online_platt", {"input": "scores", "calibeating": "tracking"}).fit(s[:n_fit], y[:n_fit])
    served = model.update_batch(cal.validate_inputs(s[n_fit:], "scores"), y[n_fit:])
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
