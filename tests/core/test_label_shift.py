"""Label shift (calibration.label_shift, calibration.prior_shift): EM needs the source priors,
bias-corrected temperature scaling by hand and against its gradient, the evidence and shrinkage of
the suggested adjustment, and on the real outputs of ../shared/data an adjustment never worse
than serving the calibrated probabilities unadjusted (by more than 0.01 nats)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import softmax

from calibration.label_shift import adjust_priors, em_priors
from calibration.prior_shift import bcts_fit, prior_shift
from tests.helpers import load_split


def test_em_priors_without_source_priors_is_refused():
    """The mean of ``p`` is a fixed point of EM started there: a default taken from ``p`` returns
    it after one iteration whatever the shift, so the source priors must be given."""
    rng = np.random.default_rng(0)
    posterior = softmax(2.0 * rng.standard_normal((500, 3)), axis=1)
    with pytest.raises(ValueError, match="source_priors"):
        em_priors(posterior)
    with pytest.raises(ValueError, match="source_priors"):
        em_priors(posterior, None)


# -- bias-corrected temperature scaling ----------------------------------------------------------

def test_bcts_recovers_its_parameters_and_matches_the_class_frequencies():
    """Labels drawn from softmax(z / 2 + b): the fit finds T = 2 and b (up to a constant), and at
    its optimum the mean calibrated probability of each class is its frequency (the gradient in b)."""
    rng = np.random.default_rng(1)
    z = 3.0 * rng.standard_normal((100_000, 3))
    b = np.array([0.5, -0.2, -0.3])
    true = softmax(z / 2.0 + b, axis=1)
    labels = (true.cumsum(axis=1) < rng.random((len(z), 1))).sum(axis=1)
    fitted = bcts_fit(z, labels)
    assert fitted.converged and fitted.temperature == pytest.approx(2.0, rel=0.02)
    np.testing.assert_allclose(fitted.biases, b - b.mean(), atol=0.02)
    np.testing.assert_allclose(fitted.predict_proba(z).mean(axis=0), np.bincount(labels) / len(labels), atol=1e-7)
    with pytest.raises(ValueError, match="labels"):
        bcts_fit(z[:5], [0, 1, 2, 3, 0])


# -- the test and the shrinkage ------------------------------------------------------------------

def test_the_likelihood_ratio_and_the_shrinkage_by_hand():
    """Two classes: L(q) = sum_i log(p_i0 q0/pi0 + p_i1 q1/pi1) maximised over q0 by a scalar
    solver gives EM's estimate and G = 2 (L(q_hat) - L(pi)); the p-value is chi2(1)'s tail and the
    suggestion moves 1 - 1/G of the way from pi to q_hat."""
    from scipy.optimize import minimize_scalar
    from scipy.stats import chi2

    rng = np.random.default_rng(2)
    posterior = softmax(np.column_stack([np.zeros(400), 1.5 * rng.standard_normal(400) - 0.4]), axis=1)
    pi = np.array([0.5, 0.5])

    def log_lik(q0):
        return np.log(posterior @ (np.array([q0, 1 - q0]) / pi)).sum()

    q0 = minimize_scalar(lambda q: -log_lik(q), bounds=(1e-9, 1 - 1e-9), method="bounded",
                         options={"xatol": 1e-12}).x
    g = 2 * (log_lik(q0) - log_lik(0.5))
    decision = prior_shift(posterior, pi, alpha=0.05)
    assert decision.estimate[0] == pytest.approx(q0, abs=1e-6)
    assert decision.statistic == pytest.approx(g, rel=1e-6) and decision.degrees_of_freedom == 1
    assert decision.p_value == pytest.approx(chi2.sf(g, 1), rel=1e-5) and decision.p_value < 0.05
    assert decision.shrinkage == pytest.approx(1 - 1 / g, rel=1e-6)
    np.testing.assert_allclose(decision.suggested, pi + (1 - 1 / g) * (decision.estimate - pi), atol=1e-12)
    body = decision.to_dict()
    assert body["adjust"] and body["test"]["p_value"] == decision.p_value


def test_no_evidence_keeps_the_source_priors():
    """Rows of the source distribution (calibrated by construction): the test rarely rejects, and
    where it does not the suggestion is the source priors exactly."""
    rng = np.random.default_rng(3)
    kept = 0
    for _ in range(50):
        logits = 2.0 * rng.standard_normal((300, 5))
        decision = prior_shift(softmax(logits, axis=1), np.full(5, 0.2))
        if decision.p_value >= 0.05:
            kept += 1
            assert decision.shrinkage == 0 and not decision.adjust
            np.testing.assert_array_equal(decision.suggested, np.full(5, 0.2))
    assert kept >= 40


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 6), st.integers(5, 200))
def test_the_suggestion_lies_between_the_source_priors_and_the_estimate(seed, k, n):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(k, 0.5), size=n)
    pi = rng.dirichlet(np.ones(k))
    decision = prior_shift(p, pi)
    assert 0 <= decision.shrinkage <= 1 and decision.statistic >= 0 and 0 <= decision.p_value <= 1
    np.testing.assert_allclose(decision.suggested.sum(), 1.0)
    np.testing.assert_allclose(decision.suggested, pi + decision.shrinkage * (decision.estimate - pi), atol=1e-12)
    assert decision.adjust == (decision.p_value < decision.alpha and decision.statistic > k - 1)


# -- on the real outputs of ../shared/data --------------------------------------------------------

def _nll(p, y):
    return float(-np.log(np.clip(p[np.arange(len(y)), y], 1e-300, 1.0)).mean())


@pytest.mark.parametrize("name", ["cifar100_densenet-bc-100", "cifar10_lenet5"])
def test_the_suggested_adjustment_is_never_worse_on_the_shared_sets(name):
    """Target sets of 1000 test rows under Dirichlet(1) priors, served through a temperature
    scaling fitted on the validation split: adjusting to EM's raw estimate on those probabilities
    raises the NLL on the 100-class set (the defect), adjusting to the suggestion (EM on BCTS, tested,
    shrunk) is never worse than no adjustment by more than 0.01 nats and better on average."""
    import calibration as cal

    kind, val, val_labels = load_split(name, "val")
    _, test, test_labels = load_split(name, "test")
    val_z, test_z = np.log(np.clip(val, 1e-12, 1)), np.log(np.clip(test, 1e-12, 1))
    assert kind == "probabilities"
    served = cal.create("temperature", {"input": "logits"}).fit(val_z, val_labels).predict_proba(test_z)
    estimator = bcts_fit(val_z, val_labels).predict_proba(test_z)
    k = val.shape[1]
    pi = np.bincount(val_labels, minlength=k) / len(val_labels)
    by_class = [np.flatnonzero(test_labels == c) for c in range(k)]
    rng = np.random.default_rng(4)
    none, raw, suggested = [], [], []
    for _ in range(6):
        counts = rng.multinomial(1000, rng.dirichlet(np.ones(k)))
        rows = np.concatenate([rng.choice(by_class[c], m) for c, m in enumerate(counts) if m])
        probs, labels = served[rows], test_labels[rows]
        none.append(_nll(probs, labels))
        raw.append(_nll(adjust_priors(probs, pi, em_priors(probs, pi).priors), labels))
        suggested.append(_nll(adjust_priors(probs, pi, prior_shift(estimator[rows], pi).suggested), labels))
    none, raw, suggested = map(np.asarray, (none, raw, suggested))
    assert (suggested <= none + 0.01).all(), (suggested - none)
    assert suggested.mean() < none.mean() - 0.02
    if k == 100:
        assert raw.mean() > none.mean() + 0.1
