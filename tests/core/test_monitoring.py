"""The drift e-process (calibration.monitoring) and the label-shift estimators
(calibration.label_shift): values by hand, properties with hypothesis, and the false-alarm rate
under the null over many simulated streams (with a Clopper-Pearson interval)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.special import softmax

from calibration.label_shift import adjust_priors, bbse_priors, em_priors
from calibration.monitoring import STATE_FIELDS, DriftTest, class_residuals, drift_test, top_label_residuals
from tests.helpers import binomtest


def calibrated_stream(rng, streams: int, n: int, k: int = 10, temperature: float = 1.0):
    """Probabilities and labels drawn from them (calibrated by construction); the served
    probabilities are the true ones sharpened by 1/temperature (temperature < 1: over-confident)."""
    logits = 2.0 * rng.standard_normal((streams, n, k))
    true = softmax(logits, axis=-1)
    u = rng.random((streams, n, 1))
    labels = np.minimum((true.cumsum(axis=-1) < u).sum(axis=-1), k - 1)
    served = softmax(logits / temperature, axis=-1)
    return served, labels


def residuals_of(probs, labels):
    return probs.max(axis=-1) - (probs.argmax(axis=-1) == labels)


def test_residuals_are_confidence_minus_correctness():
    probs = np.array([[0.7, 0.2, 0.1], [0.4, 0.5, 0.1], [0.5, 0.5, 0.0]])
    np.testing.assert_allclose(top_label_residuals(probs, [0, 0, 0]), [0.7 - 1, 0.5, 0.5 - 1])


def test_wealth_by_hand():
    test = DriftTest(alpha=0.1, tolerance=0.0, half_life=1.0, max_bet=0.5)
    test.update([0.5, 0.5, -0.5])
    # bet 0 (mean 0), then mean 0.25, second 0.25 -> clip(1) = 0.5, then mean 0.375, second 0.25 -> 0.5
    expected = math.log(1 + 0.5 * 0.5) + math.log(1 - 0.5 * 0.5)
    assert test.log_wealth == pytest.approx(expected)
    assert test.n == 3 and test.alarm_at == -1


def test_state_round_trips():
    rng = np.random.default_rng(0)
    test = DriftTest().update(rng.uniform(-1, 1, 50))
    again = DriftTest.from_dict(test.to_dict())
    assert again.to_dict() == test.to_dict()
    test.update([0.3, -0.2])
    again.update([0.3, -0.2])
    assert again.to_dict() == test.to_dict()


def test_updating_in_pieces_equals_one_update():
    r = np.random.default_rng(1).uniform(-1, 1, 300)
    whole = DriftTest(tolerance=0.0).update(r)
    pieces = DriftTest(tolerance=0.0).update(r[:100]).update(r[:0])
    for start in range(100, 300, 7):  # short updates take the loop, long ones the linear filter
        pieces.update(r[start:start + 7])
    for key in STATE_FIELDS:
        np.testing.assert_allclose(pieces.to_dict()[key], whole.to_dict()[key], rtol=1e-12, atol=1e-14, err_msg=key)


def step_by_step(test: DriftTest, r: np.ndarray, c: np.ndarray) -> DriftTest:
    """The e-process as its definition reads, one row at a time (one stream, with classes)."""
    keep = 2.0 ** (-1.0 / test.half_life)
    mean, second, top = 0.0, 0.25, 0.0
    class_mean, class_second, classes = np.zeros(c.shape[1]), np.full(c.shape[1], 0.25), 0.0
    highest, alarm = 0.0, -1
    for t in range(len(r)):
        excess = np.sign(mean) * max(abs(mean) - test.tolerance, 0.0)
        stake = float(np.clip(excess / second, -test.max_bet, test.max_bet))
        top += math.log1p(stake * r[t] - abs(stake) * test.tolerance)
        raw = np.sign(class_mean) * np.maximum(np.abs(class_mean) - test.class_tolerance, 0.0) / class_second
        stakes = raw * min(1.0, test.max_bet / max(np.abs(raw).sum(), 1e-300))
        classes += math.log1p(stakes @ c[t] - np.abs(stakes).sum() * test.class_tolerance)
        log_e = math.log((math.exp(top) + math.exp(classes)) / 2)
        highest = max(highest, log_e)
        if alarm < 0 and log_e >= test.threshold:
            alarm = t + 1
        mean, second = keep * mean + (1 - keep) * r[t], keep * second + (1 - keep) * r[t] ** 2
        class_mean = keep * class_mean + (1 - keep) * c[t]
        class_second = keep * class_second + (1 - keep) * c[t] ** 2
    return {"log_wealth": log_e, "max_log_wealth": highest, "alarm_at": alarm, "mean": mean,
            "class_mean": class_mean}


def test_the_vectorised_update_is_the_definition():
    rng = np.random.default_rng(11)
    probs, _ = calibrated_stream(rng, 1, 800, k=3, temperature=0.6)
    labels = labels_with_priors(rng, probs, np.array([3.0, 1.0, 1.0]))
    r, c = residuals_of(probs, labels)[0], class_residuals(probs[0], labels[0])
    test = DriftTest(alpha=0.05, tolerance=0.01, class_tolerance=0.01, half_life=50, n_classes=3)
    expected = step_by_step(test, r, c)
    test.update(r[:300], c[:300]).update(r[300:], c[300:])
    assert expected["alarm_at"] > 0 and test.alarm_at == expected["alarm_at"]
    for key in ("log_wealth", "max_log_wealth", "mean", "class_mean"):
        np.testing.assert_allclose(getattr(test, key), expected[key], rtol=1e-9, err_msg=key)


@pytest.mark.parametrize("bad", [{"alpha": 0}, {"alpha": 1}, {"tolerance": -0.1}, {"half_life": 0},
                                 {"max_bet": 0.99}])
def test_bad_options(bad):
    with pytest.raises(ValueError):
        DriftTest(**bad)


def test_bad_residuals():
    with pytest.raises(ValueError, match="lie in"):
        DriftTest().update([1.5])
    with pytest.raises(ValueError, match="shape"):
        DriftTest(shape=(3,)).update(np.zeros((2, 4)))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-1, 1), min_size=1, max_size=200), st.floats(0, 0.3), st.floats(1, 500))
def test_wealth_stays_positive_and_finite(residuals, tolerance, half_life):
    test = DriftTest(tolerance=tolerance, half_life=half_life).update(residuals)
    assert np.isfinite(test.log_wealth) and test.max_log_wealth >= max(test.log_wealth, 0.0)
    assert test.alarmed == (test.max_log_wealth >= test.threshold)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**31 - 1), st.sampled_from([0.05, 0.1, 0.2]), st.sampled_from([0.0, 0.01]))
def test_false_alarm_rate_under_the_null_is_at_most_alpha(seed, alpha, tolerance):
    """Calibrated streams (the exact null at tolerance 0): the share of 400 streams of 1500 rows
    that ever alarm is not significantly above alpha (one-sided binomial test at 1%)."""
    rng = np.random.default_rng(seed)
    probs, labels = calibrated_stream(rng, 400, 1500)
    test = DriftTest(alpha=alpha, tolerance=tolerance, half_life=100, shape=(400,))
    test.update(residuals_of(probs, labels))
    alarms = int(test.alarmed.sum())
    assert binomtest(alarms, 400, alpha, alternative="greater").pvalue > 0.01, (alarms, alpha)


def test_over_confidence_alarms():
    rng = np.random.default_rng(3)
    probs, labels = calibrated_stream(rng, 50, 3000, temperature=0.5)
    test = DriftTest(alpha=0.01, tolerance=0.02, half_life=200, shape=(50,)).update(residuals_of(probs, labels))
    assert test.alarmed.all()
    assert np.median(test.alarm_at) < 1000


def test_drift_test_of_one_stream():
    rng = np.random.default_rng(4)
    probs, labels = calibrated_stream(rng, 1, 3000, temperature=0.5)
    test = drift_test(probs[0], labels[0], alpha=0.01, half_life=200)
    assert bool(test.alarmed) and test.max_log_wealth >= test.threshold


def labels_with_priors(rng, probs, weights):
    """Labels drawn from the posteriors re-weighted by ``weights`` (a label shift the served
    probabilities do not know of)."""
    shifted = probs * weights
    shifted /= shifted.sum(axis=-1, keepdims=True)
    u = rng.random((*shifted.shape[:-1], 1))
    return np.minimum((shifted.cumsum(axis=-1) < u).sum(axis=-1), probs.shape[-1] - 1)


def run_with_classes(probs, labels, **options):
    streams, n, k = probs.shape
    test = DriftTest(shape=(streams,), n_classes=k, **options)
    return test.update(residuals_of(probs, labels), class_residuals(probs.reshape(-1, k), labels.ravel())
                       .reshape(streams, n, k))


def test_class_residuals():
    np.testing.assert_allclose(class_residuals([[0.7, 0.3], [0.4, 0.6]], [1, 1]), [[0.7, -0.7], [0.4, -0.4]])


def test_class_state_round_trips():
    rng = np.random.default_rng(9)
    probs = rng.dirichlet(np.ones(3), size=40)
    labels = rng.integers(0, 3, 40)
    test = drift_test(probs[:30], labels[:30], class_tolerance=0.0)
    again = DriftTest.from_dict(test.to_dict())
    test.update(top_label_residuals(probs[30:], labels[30:]), class_residuals(probs[30:], labels[30:]))
    again.update(top_label_residuals(probs[30:], labels[30:]), class_residuals(probs[30:], labels[30:]))
    assert again.to_dict() == test.to_dict() and test.n == 40 and len(test.to_dict()["class_mean"]) == 3
    with pytest.raises(ValueError, match="class_residuals"):
        again.update([0.1])


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**31 - 1), st.sampled_from([0.05, 0.1]))
def test_false_alarm_rate_with_class_frequencies_under_the_null(seed, alpha):
    rng = np.random.default_rng(seed)
    probs, labels = calibrated_stream(rng, 300, 1500, k=4)
    test = run_with_classes(probs, labels, alpha=alpha, tolerance=0.0, class_tolerance=0.0, half_life=100)
    alarms = int(test.alarmed.sum())
    assert binomtest(alarms, 300, alpha, alternative="greater").pvalue > 0.01, (alarms, alpha)


def test_a_label_shift_alarms_through_the_class_frequencies():
    rng = np.random.default_rng(10)
    probs, _ = calibrated_stream(rng, 40, 3000, k=4)
    labels = labels_with_priors(rng, probs, np.array([4.0, 1.0, 1.0, 1.0]))
    test = run_with_classes(probs, labels, half_life=200)
    top_only = DriftTest(shape=(40,), half_life=200).update(residuals_of(probs, labels))
    assert test.alarmed.mean() >= 0.9 and test.alarmed.sum() > top_only.alarmed.sum()


# -- label shift ---------------------------------------------------------------------------------

def shifted_set(rng, n: int, priors: np.ndarray, k: int = 4):
    """Gaussian classes with known means: the Bayes posterior under uniform source priors, on rows
    drawn with ``priors``."""
    means = 1.5 * np.eye(k)
    labels = rng.choice(k, size=n, p=priors)
    x = means[labels] + rng.standard_normal((n, k))
    posterior = softmax(x @ means.T - 0.5 * (means ** 2).sum(axis=1), axis=1)
    return posterior, labels


def test_em_recovers_the_target_priors():
    rng = np.random.default_rng(5)
    q = np.array([0.6, 0.2, 0.15, 0.05])
    posterior, _ = shifted_set(rng, 20000, q)
    estimate = em_priors(posterior, np.full(4, 0.25))
    assert estimate.converged
    np.testing.assert_allclose(estimate.priors, q, atol=0.02)


def test_bbse_recovers_the_target_priors():
    rng = np.random.default_rng(6)
    source, source_labels = shifted_set(rng, 20000, np.full(4, 0.25))
    q = np.array([0.1, 0.1, 0.2, 0.6])
    target, _ = shifted_set(rng, 20000, q)
    np.testing.assert_allclose(bbse_priors(source, source_labels, target).priors, q, atol=0.03)


def test_no_shift_keeps_the_priors():
    rng = np.random.default_rng(7)
    posterior, _ = shifted_set(rng, 20000, np.full(4, 0.25))
    np.testing.assert_allclose(em_priors(posterior, np.full(4, 0.25)).priors, 0.25, atol=0.02)


def test_adjusting_to_the_true_priors_lowers_the_nll():
    rng = np.random.default_rng(8)
    q = np.array([0.7, 0.1, 0.1, 0.1])
    posterior, labels = shifted_set(rng, 5000, q)
    adjusted = adjust_priors(posterior, np.full(4, 0.25), q)
    np.testing.assert_allclose(adjusted.sum(axis=1), 1.0)

    def nll(p):
        return -np.log(p[np.arange(len(labels)), labels]).mean()

    assert nll(adjusted) < nll(posterior) - 0.05


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_adjusting_to_the_same_priors_changes_nothing(seed):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(5), size=20)
    pi = rng.dirichlet(np.ones(5))
    np.testing.assert_allclose(adjust_priors(p, pi, pi), p, atol=1e-12)


def test_quality_figure():
    from calibration.quality_plot import quality_figure

    values = [{"estimate": 0.03, "low": 0.02, "high": 0.05}, {"estimate": 0.04, "low": None, "high": None}]
    svg = quality_figure(["day 1", "day 2"], {"ECE": {"calibrated": values}}, "svg", "a title")
    assert b"day 2" in svg and b"a title" in svg
    with pytest.raises(ValueError, match="format"):
        quality_figure(["day 1"], {"ECE": {"calibrated": values[:1]}}, "gif")


def test_label_free_residuals():
    from calibration.monitoring import label_free_residuals

    top, classes = label_free_residuals([[0.7, 0.3], [0.2, 0.8]], 0.6, [0.5, 0.5])
    np.testing.assert_allclose(top, [0.1, 0.2])
    np.testing.assert_allclose(classes, [[0.2, -0.2], [-0.3, 0.3]])
    with pytest.raises(ValueError, match="reference"):
        label_free_residuals([[0.7, 0.3]], 0.6, [0.2, 0.3, 0.5])


def test_label_free_false_alarm_rate_against_the_population_reference():
    """Rows drawn from a fixed population, the reference being the population's own means: the
    share of 400 streams that ever alarm is not significantly above alpha."""
    from calibration.monitoring import label_free_residuals

    rng = np.random.default_rng(12)
    population = rng.dirichlet(np.ones(4), size=5000)
    top, classes = label_free_residuals(population, population.max(axis=1).mean(), population.mean(axis=0))
    rows = rng.integers(0, 5000, (400, 1500))
    test = DriftTest(alpha=0.1, tolerance=0.0, class_tolerance=0.0, half_life=100, shape=(400,), n_classes=4)
    test.update(top[rows], classes[rows])
    assert binomtest(int(test.alarmed.sum()), 400, 0.1, alternative="greater").pvalue > 0.01
