"""Method-specific checks against other libraries and hand-computed values."""

import numpy as np
import pytest
from scipy.optimize import check_grad
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

import calibration as cal
from calibration.methods.isotonic import interpolate_monotone
from calibration.methods.isotonic_knots import fit_isotonic_binary
from tests.helpers import load_split, make_reference_input


def test_isotonic_fit_equals_scikit_learn():
    rng = np.random.default_rng(5)
    x = np.round(rng.random(3000), 3)  # many ties, which must be pooled
    y = rng.random(3000) < x**2
    xs, ys = fit_isotonic_binary(x, y)
    reference = IsotonicRegression(out_of_bounds="clip").fit(x, y.astype(float))
    probe = np.concatenate([rng.random(2000), [-0.5, 0.0, 1.0, 1.5]])
    np.testing.assert_allclose(interpolate_monotone(probe, xs, ys), reference.predict(probe),
                               rtol=0, atol=1e-12)


def test_irm_is_mix_n_match_plus_renormalisation(reference):
    """The Mix-n-Match code: IsotonicRegression on all pooled entries, + 1e-9 p, unnormalised."""
    logits, labels = reference
    p = cal.softmax(logits)
    onehot = np.eye(10)[labels]
    ir = IsotonicRegression(out_of_bounds="clip").fit(p.ravel(), onehot.ravel())
    theirs = ir.predict(p.ravel()).reshape(p.shape) + 1e-9 * p
    assert theirs.sum(axis=1).min() < 0.75 and theirs.sum(axis=1).max() > 1.3
    ours = cal.IsotonicMulticlass().fit(logits, labels).predict_proba(logits)
    np.testing.assert_allclose(ours, theirs / theirs.sum(axis=1, keepdims=True), atol=1e-12)


def test_irova_rows_that_map_to_zero_become_uniform():
    logits = np.array([[5.0, 0.0], [4.0, 0.0], [0.0, 5.0], [0.0, 4.0]])
    irova = cal.IsotonicOneVsAll().fit(logits, [1, 1, 0, 0])  # anti-correlated: maps to 0
    probs = irova.predict_proba(np.array([[5.0, 0.0]]))
    np.testing.assert_array_equal(probs, [[0.5, 0.5]])


def test_binary_platt_equals_unregularised_logistic_regression_on_smoothed_targets():
    rng = np.random.default_rng(7)
    scores = rng.standard_normal(400) * 2
    labels = (rng.random(400) < 1 / (1 + np.exp(-1.5 * scores + 0.3))).astype(int)
    platt = cal.PlattScaling(input="scores").fit(scores, labels)
    # weighted logistic regression with the smoothed targets as sample weights
    n_pos, n_neg = labels.sum(), (1 - labels).sum()
    t = np.where(labels == 1, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
    x = np.concatenate([scores, scores])[:, None]
    y = np.concatenate([np.ones(400), np.zeros(400)])
    lr = LogisticRegression(C=np.inf, tol=1e-12, max_iter=10000).fit(
        x, y, sample_weight=np.concatenate([t, 1 - t]))
    assert platt.slope_[0] == pytest.approx(lr.coef_[0, 0], rel=1e-6)
    assert platt.intercept_[0] == pytest.approx(lr.intercept_[0], rel=1e-6, abs=1e-8)


def test_platt_one_vs_rest_log_odds_are_accurate_near_one():
    from calibration.methods.platt import class_log_odds

    logits = np.array([[40.0, 0.0, 1.0], [0.0, 0.1, -0.2]])
    s = class_log_odds(logits)
    p = cal.softmax(logits)
    expected_top = np.log(p[0, 0]) - np.log(np.exp(0.0 - 40) + np.exp(1.0 - 40)) + np.log(
        np.exp(0.0) + np.exp(-40) + np.exp(-39))
    assert np.isfinite(s).all()
    assert s[0, 0] == pytest.approx(expected_top, rel=1e-12)
    np.testing.assert_allclose(s[1], np.log(p[1]) - np.log1p(-p[1]), rtol=1e-12)


@pytest.mark.parametrize("method", ["matrix", "dirichlet", "platt"])
def test_analytic_gradients_agree_with_finite_differences(method, monkeypatch):
    import calibration.methods.linear as linear
    import calibration.methods.platt as platt

    captured = {}

    def capture(fun, x0, **kwargs):
        captured["fun"], captured["x0"] = fun, x0
        return x0, cal.FitDiagnostics(True, 0, "captured")

    # matrix and Dirichlet are fitted by trust-region Newton (hess=None, Hessian-vector products)
    monkeypatch.setattr(linear, "minimize_newton", lambda fun, hess, x0, **kwargs: capture(fun, x0))
    monkeypatch.setattr(platt, "minimize_smooth", capture)
    logits, labels = make_reference_input(n=200, k=4, seed=4)
    options = {"off_diagonal_l2": 0.3, "bias_l2": 0.2} if method in ("matrix", "dirichlet") else {}
    cal.create(method, options).fit(logits, labels)
    rng = np.random.default_rng(0)
    point = captured["x0"] + 0.1 * rng.standard_normal(captured["x0"].shape)
    error = check_grad(lambda t: captured["fun"](t)[0], lambda t: captured["fun"](t)[1], point)
    assert error < 1e-5 * max(1.0, np.linalg.norm(captured["fun"](point)[1]))


def test_vector_scaling_gradient_and_hessian_agree_with_finite_differences(monkeypatch):
    from scipy.optimize import approx_fprime

    import calibration.methods.linear as linear

    captured = {}
    real_minimize = linear.minimize_newton

    def capture(fun, hess, x0, **kwargs):
        captured.update(fun=fun, hess=hess, x0=x0)
        return real_minimize(fun, hess, x0, **kwargs)

    monkeypatch.setattr(linear, "minimize_newton", capture)
    logits, labels = make_reference_input(n=200, k=4, seed=4)
    cal.VectorScaling().fit(logits, labels)
    point = captured["x0"] + 0.1 * np.random.default_rng(0).standard_normal(captured["x0"].shape)
    fun, hess = captured["fun"], captured["hess"]
    assert check_grad(lambda t: fun(t)[0], lambda t: fun(t)[1], point) < 1e-6
    numeric = np.array([approx_fprime(point, lambda t, i=i: fun(t)[1][i], 1e-7) for i in range(point.size)])
    np.testing.assert_allclose(hess(point), numeric, atol=1e-5)


def test_dirichlet_canonical_parameters():
    logits, labels = make_reference_input(n=1000, k=3, seed=9)
    fit = cal.DirichletCalibration(off_diagonal_l2=0.1, bias_l2=0.1).fit(logits, labels)
    canonical = fit.canonical_parameters()
    a = np.array(canonical["A"])
    assert np.all(a >= 0) and np.all(a.min(axis=0) == 0)
    # c is the calibrated output for a uniform input
    np.testing.assert_allclose(fit.predict_proba(np.zeros((1, 3)))[0], canonical["c"], atol=1e-12)
    # A and c determine the same map (Kull et al. 2019 §3): softmax(A ln(q / u) + ln c)
    q = cal.softmax(logits[:5])
    via_canonical = cal.softmax(np.log(q * 3) @ a.T + np.log(canonical["c"]))
    np.testing.assert_allclose(via_canonical, fit.predict_proba(logits[:5]), atol=1e-10)


def test_class_temperature_lowers_validation_ece_below_single_temperature():
    kind, x, labels = load_split("cifar100_densenet-bc-100", "val")
    single = cal.TemperatureScaling(input=kind).fit(x, labels)
    per_class = cal.ClassTemperatureScaling(input=kind).fit(x, labels)
    assert per_class.diagnostics_.converged
    assert cal.ece(per_class.predict_proba(x), labels) < cal.ece(single.predict_proba(x), labels)
    assert len(set(per_class.temperatures_.tolist())) > 1


def test_top_n_expectation_consistency_matches_top_n_accuracy():
    kind, x, labels = load_split("cifar100_wrn16-4", "val")
    ec = cal.ExpectationConsistency(input=kind, top_n=5).fit(x, labels)
    probs = ec.predict_proba(x)
    top5_confidence = np.sort(probs, axis=1)[:, -5:].sum(axis=1).mean()
    assert top5_confidence == pytest.approx(cal.top_n_accuracy(probs, labels, n=5), abs=1e-12)


def test_composition_fits_each_step_on_the_previous_output(reference):
    logits, labels = reference
    chain = cal.Composition(steps=[{"method": "temperature"}, {"method": "isotonic_one_vs_all"}])
    chain.fit(logits, labels)
    ts = cal.TemperatureScaling().fit(logits, labels)
    irova = cal.IsotonicOneVsAll(input="probabilities").fit(ts.predict_proba(logits), labels)
    np.testing.assert_array_equal(chain.predict_proba(logits),
                                  irova.predict_proba(ts.predict_proba(logits)))
    assert chain.steps[0].temperature_ == ts.temperature_


def test_histogram_binning_hand_computed():
    probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.05, 0.95]])
    hb = cal.HistogramBinning(input="probabilities", n_bins=2).fit(probs, [0, 1, 1, 1])
    # class 0: bin (0, .5] has p = .3, .05 -> 0 hits; bin (.5, 1] has .9, .8 -> 1 hit of 2
    np.testing.assert_allclose(hb.values_[0], [0.0, 0.5])
    np.testing.assert_allclose(hb.values_[1], [0.5, 1.0])
    out = hb.predict_proba(np.array([[0.6, 0.4]]))
    np.testing.assert_allclose(out, [[0.5, 0.5]])


def test_registry_describes_every_method():
    described = {m["name"]: m for m in cal.describe_methods()}
    assert set(described) == set(cal.METHODS)
    for required in ["temperature", "expectation_consistency", "ensemble_temperature", "vector",
                     "matrix", "dirichlet", "platt", "isotonic_multiclass",
                     "isotonic_one_vs_all", "class_temperature", "composition",
                     "histogram_binning"]:
        assert required in described
    assert described["expectation_consistency"]["options"]["properties"]["top_n"]["minimum"] == 1
    assert described["temperature"]["accuracy_preserving"] is True
