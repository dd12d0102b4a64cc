"""Online Platt scaling (Online Newton Step) and calibeating by tracking."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import expit

import calibration as cal
from calibration.online import _project


def _ons_by_hand(scores, labels, gamma=0.1, epsilon=1.0, radius=100.0):
    """Hazan et al.'s Online Newton Step with numpy's linear algebra and SLSQP's projection."""
    theta, hessian, out = np.array([1.0, 0.0]), epsilon * np.eye(2), []
    for s, y in zip(scores, labels, strict=True):
        z = np.array([s, 1.0])
        p = expit(theta @ z)
        out.append(p)
        g = (p - y) * z
        hessian = hessian + np.outer(g, g)
        step = theta - np.linalg.solve(hessian, g) / gamma
        if np.linalg.norm(step) > radius:
            step = minimize(lambda x, y=step, a=hessian: (x - y) @ a @ (x - y), step * radius / np.linalg.norm(step),
                            constraints=[{"type": "ineq", "fun": lambda x, r=radius: r ** 2 - x @ x}],
                            method="SLSQP", options={"ftol": 1e-14, "maxiter": 500}).x
        theta = step
    return np.array(out), theta


def test_the_update_is_the_online_newton_step():
    rng = np.random.default_rng(0)
    scores = rng.normal(0, 3, 400)
    labels = (rng.random(400) < expit(0.4 * scores + 0.5)).astype(int)
    ops = cal.OnlinePlattScaling()
    forecasts = ops.predict_update(scores, labels)
    expected, theta = _ons_by_hand(scores, labels)
    assert forecasts == pytest.approx(expected, abs=1e-10)
    assert ops.coef_ == pytest.approx(tuple(theta), abs=1e-10) and ops.n_updates_ == 400
    assert forecasts[0] == pytest.approx(expit(scores[0]))  # starts as the base model


def test_the_projection_in_the_a_norm_matches_a_constrained_solver():
    rng = np.random.default_rng(1)
    for _ in range(20):
        m = rng.normal(size=(2, 2))
        a = m @ m.T + 0.1 * np.eye(2)
        y = rng.normal(0, 10, 2)
        y *= (4 + 10 * rng.random()) / np.linalg.norm(y)  # outside the ball
        radius = 3.0
        got = np.array(_project(a[0, 0], a[0, 1], a[1, 1], y[0], y[1], radius))
        best = minimize(lambda x, y=y, a=a: (x - y) @ a @ (x - y), y * radius / np.linalg.norm(y), method="SLSQP",
                        constraints=[{"type": "ineq", "fun": lambda x, r=radius: r ** 2 - x @ x}],
                        options={"ftol": 1e-15, "maxiter": 1000}).x
        assert np.linalg.norm(got) == pytest.approx(radius, rel=1e-9)
        assert (got - y) @ a @ (got - y) <= (best - y) @ a @ (best - y) + 1e-7
    assert _project(1.0, 0.0, 1.0, 0.5, 0.5, 3.0) == (0.5, 0.5)  # inside: unchanged


def test_it_learns_a_fixed_platt_map_and_follows_a_drifting_one():
    rng = np.random.default_rng(2)
    n = 30000
    scores = rng.normal(0, 2, n)
    a_true = np.where(np.arange(n) < n // 2, 0.5, 1.5)  # the base model's scale changes half-way
    labels = (rng.random(n) < expit(a_true * scores - 0.3)).astype(int)
    ops = cal.OnlinePlattScaling()
    forecasts = ops.predict_update(scores[: n // 2], labels[: n // 2])
    assert ops.coef_ == pytest.approx((0.5, -0.3), abs=0.06)
    late = ops.predict_update(scores[n // 2:], labels[n // 2:])
    assert 1.25 < ops.coef_[0] < 1.6  # most of the way (the steps shrink as A_t grows: ONS lags a drift)
    fixed = expit(0.5 * scores[n // 2:] - 0.3)  # the first half's map, never updated
    tail = slice(-5000, None)

    def loss(p):
        return -np.mean(np.where(labels[n // 2:][tail] == 1, np.log(p[tail]), np.log1p(-p[tail])))

    oracle = expit(1.5 * scores[n // 2:] - 0.3)
    assert loss(late) < loss(fixed) and loss(late) < loss(oracle) + 0.01
    assert len(forecasts) == n // 2


def test_state_round_trips_through_json_and_continues_identically():
    rng = np.random.default_rng(3)
    scores, labels = rng.normal(size=600), rng.integers(0, 2, 600)
    ops = cal.OnlinePlattScaling(gamma=0.2).update(scores[:300], labels[:300])
    copy = cal.OnlinePlattScaling.from_dict(json.loads(json.dumps(ops.to_dict())))
    assert copy.predict_update(scores[300:], labels[300:]).tolist() == \
        ops.predict_update(scores[300:], labels[300:]).tolist()
    assert copy.to_dict() == ops.to_dict()
    with pytest.raises(ValueError):
        cal.OnlinePlattScaling.from_dict({**ops.to_dict(), "method": "platt"})


def test_tracking_forecasts_the_mean_label_of_the_bin_so_far():
    tracker = cal.TrackingCalibeater(n_bins=2)
    out = tracker.predict_update([0.2, 0.3, 0.4, 0.9, 0.8, 0.0, 1.0], [1, 0, 1, 0, 0, 1, 1])
    assert out.tolist() == [0.2, 1.0, 0.5, 0.9, 0.0, 2 / 3, 0.0]
    assert tracker.counts_.tolist() == [4, 3] and tracker.bins([0.0, 0.5, 0.50001, 1.0]).tolist() == [0, 0, 1, 1]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        cal.OnlinePlattScaling(gamma=0)
    with pytest.raises(ValueError):
        cal.OnlinePlattScaling(radius=0.5)
    with pytest.raises(ValueError):
        cal.OnlinePlattScaling().predict_update([0.1, np.nan], [0, 1])
    with pytest.raises(ValueError):
        cal.OnlinePlattScaling().predict_update([0.1, 0.2], [0, 2])
    with pytest.raises(ValueError):
        cal.TrackingCalibeater(n_bins=0)
