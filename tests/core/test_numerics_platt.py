"""Issue #23: Platt scaling on binary scores that separate the labels perfectly. Its smoothed
targets give a finite regularised optimum (documented in ``platt``'s docstring); the fit must
reach it, whatever the scale of the scores, and report convergence only there."""

import numpy as np
import pytest
from scipy.optimize import minimize

import calibration as cal


def separable_scores(scale: float, n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Scores whose sign is the label, with a gap of ``scale`` around 0."""
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    y = (s > 0).astype(np.int64)
    return scale * (s + 0.5 * np.sign(s)), y


def reference_fit(s: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Platt's objective written out independently (log-odds of class 1 is ``u a + b`` with
    ``u = s / max|s|``, a rescaling under which the probabilities are the same), minimised by
    BFGS from 0 to a gradient of 1e-12: the probabilities of class 1 and the objective."""
    u = s / np.abs(s).max()
    n_pos, n_neg = y.sum(), len(y) - y.sum()
    t = np.where(y == 1, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))

    def objective(theta):
        f = theta[0] * u + theta[1]
        p = 1 / (1 + np.exp(-f))
        return np.mean(np.logaddexp(0, f) - t * f), np.array([np.mean((p - t) * u), np.mean(p - t)])

    result = minimize(objective, np.zeros(2), jac=True, method="BFGS", options={"gtol": 1e-12})
    assert np.abs(result.jac).max() < 1e-9
    f = result.x[0] * u + result.x[1]
    return 1 / (1 + np.exp(-f)), float(result.fun)


def test_the_scores_separate_the_labels():
    for scale in (1e-10, 1.0, 1e8):
        s, y = separable_scores(scale)
        assert np.all((s > 0) == (y == 1)) and np.abs(s).min() >= 0.5 * scale


@pytest.mark.parametrize("scale", [1e-10, 1e-6, 1.0, 1e4, 1e8])
def test_separable_scores_reach_the_finite_regularised_optimum(scale):
    """An L-BFGS fit in raw scores reported convergence at a = 1 for scores of size 1e-10 (its
    gradient in a is proportional to the scores) and stopped short at 1e8."""
    s, y = separable_scores(scale)
    fit = cal.create("platt", {"input": "scores"}).fit(s, y)
    expected, objective = reference_fit(s, y)
    assert fit.diagnostics_.converged
    assert np.isfinite(fit.slope_).all() and np.isfinite(fit.intercept_).all()
    np.testing.assert_allclose(fit.predict_proba(s)[:, 1], expected, rtol=1e-5, atol=1e-12)
    assert fit.diagnostics_.objective == pytest.approx(objective, rel=1e-10)


def test_the_optimum_is_finite_not_separating():
    """Along the fitted direction the smoothed-target loss rises again: scaling the fitted
    log-odds by 2 or 10 (towards the separating limit) costs more than the fit, so the fit is
    not a point on a ray along which the loss keeps falling."""
    s, y = separable_scores(1.0, n=1000, seed=4)
    fit = cal.create("platt", {"input": "scores"}).fit(s, y)
    n_pos, n_neg = y.sum(), len(y) - y.sum()
    t = np.where(y == 1, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
    f = fit.slope_[0] * s + fit.intercept_[0]

    def loss(c):
        return np.mean(np.logaddexp(0, c * f) - t * c * f)

    assert loss(1.0) < loss(1.01) < loss(2.0) < loss(10.0)
    assert loss(1.0) < loss(0.99)
    assert np.all((f > 0) == (y == 1))


def test_one_vs_rest_with_separable_classes_converges_to_finite_weights():
    rng = np.random.default_rng(1)
    z = rng.normal(size=(300, 3))
    y = z.argmax(axis=1)
    fit = cal.create("platt").fit(z, y)
    assert fit.diagnostics_.converged and fit.diagnostics_.gradient_norm <= 1e-6
    assert np.abs(fit.slope_).max() < 100
