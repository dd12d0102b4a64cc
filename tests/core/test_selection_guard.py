"""Issue #23 item 2: ``auto`` cannot pick a trap.

The trap: class 0 is separable in the validation split (its logit is high on its own rows and
low on every other row) but not in test, where 5% of its rows look like the others. Vector and
Dirichlet scaling fit a class-0 weight of about 19 (TS: 0.6), vector wins the cross-validation
by 0.03 nats, and on test both are 3-10% worse than uncalibrated. The support guard
(``calibration.selection``, step 2) refuses them; the simplicity guard (step 3) keeps TS-like
sets on their one-temperature fits at no cost."""

import functools
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import calibration as cal
from calibration.comparison import METRICS, Comparison, MethodResult, candidate, default_candidates
from calibration.metrics.scores import tail_risk
from calibration.selection import CLEAR_FACTOR, select
from tests.helpers import sweep


def separable_in_validation(seed=0, n_val=2000, n_test=10000, k=10, overlap_test=0.05):
    """``(val logits, val labels, test logits, test labels)`` of the trap (module docstring)."""
    rng = np.random.default_rng(seed)

    def split(n, overlap):
        y = rng.integers(0, k, n)
        z = rng.normal(0.0, 1.0, (n, k)) + 1.5 * np.eye(k)[y]
        z[:, 0] = np.where(y == 0, 3.0, -1.0) + rng.normal(0.0, 0.4, n)
        looks_like_others = (y == 0) & (rng.random(n) < overlap)
        z[looks_like_others, 0] = -1.0 + rng.normal(0.0, 0.4, looks_like_others.sum())
        return z, y

    return (*split(n_val, 0.0), *split(n_test, overlap_test))


def held_out_nll(name, kind, x, y, x_test, y_test):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cal.ConvergenceWarning)
        fitted = candidate(name).create(kind).fit(x, y)
    return cal.nll(fitted.predict_proba(x_test), y_test)


@functools.cache
def trap_auto(seed):
    z, y, z_test, y_test = separable_in_validation(seed)
    return cal.create("auto", {}).fit(z, y), z_test, y_test


@functools.cache
def trap_test_nll(seed):
    """Each default candidate's test NLL, fitted on the whole validation split of the trap."""
    z, y, z_test, y_test = separable_in_validation(seed)
    return {c.name: held_out_nll(c.name, "logits", z, y, z_test, y_test) for c in default_candidates(len(y), 10)}


# seed 0 in the default run (the trap, its cross-validation winner and the guard's refusal, each
# asserted); seeds 1 and 2, the same trap drawn again (~4 s each, auto's 5-fold Dirichlet fits), with
# --full-sweeps
@pytest.mark.parametrize("seed", sweep([0, 1, 2], [0]))
def test_auto_does_not_take_the_trap(seed):
    auto, z_test, y_test = trap_auto(seed)
    raw = cal.nll(cal.softmax(z_test), y_test)
    ours = cal.nll(auto.predict_proba(z_test), y_test)
    test_nll = trap_test_nll(seed)
    assert test_nll["vector"] > raw  # the trap is real: the cross-validation winner is worse than nothing
    assert auto.comparison_.result("vector").mean("nll") == min(
        r.mean("nll") for r in auto.comparison_.results)
    assert select(auto.comparison_, guards=False).chosen.name == "vector"  # the rule before the guards
    assert ours < raw
    assert ours <= 1.02 * min(test_nll.values())
    assert auto.selection_.excluded["vector"].startswith("support guard: tail risk")


def test_the_trap_weight_is_far_outside_ts():
    z, y, _, _ = separable_in_validation(0)
    vector = cal.VectorScaling().fit(z, y)
    ts = cal.TemperatureScaling().fit(z, y)
    assert vector.weights_[0] > 10 / ts.temperature_ and vector.diagnostics_.converged


def test_tail_risk_by_hand():
    reference = np.array([[0.7, 0.2, 0.1], [0.5, 0.25, 0.25]])
    assert tail_risk(reference, reference) == 0.0
    calibrated = np.array([[0.8, 0.2 - 1e-9, 1e-9], [0.5, 0.25, 0.25]])
    # 1e-9 < 1e-6 * 0.1: that entry counts, 0.1 log(0.1 / 1e-9), over 2 rows
    assert tail_risk(calibrated, reference) == pytest.approx(0.1 * np.log(1e8) / 2, rel=1e-12)
    calibrated[0] = [0.9, 0.1, 0.0]  # a zero counts as 1e-300
    assert tail_risk(calibrated, reference) == pytest.approx(0.1 * np.log(0.1 / 1e-300) / 2, rel=1e-12)
    calibrated[0] = [0.9, 0.1 - 1e-6, 1e-6]  # 1e-6 is not below 1e-6 * 0.1: a modest claim
    assert tail_risk(calibrated, reference) == 0.0


def hand_comparison(nll_by_method, tails=None, reference=None, baseline=1.0):
    results = []
    for name, folds in nll_by_method.items():
        per_fold = {m: [0.0] * len(folds) for m in METRICS}
        per_fold["nll"] = list(folds)
        results.append(MethodResult(candidate(name), False, per_fold,
                                    tail_risk=list((tails or {}).get(name, [0.0] * len(folds)))))
    folds = len(next(iter(nll_by_method.values())))
    uncalibrated = {m: [0.0] * folds for m in METRICS}
    uncalibrated["nll"] = [baseline] * folds
    return Comparison(1000, 10, folds, 0, uncalibrated, results, list(reference or []))


def test_a_complex_candidate_winning_four_folds_by_a_little_does_not_displace_ts():
    ts = [0.500, 0.510, 0.490, 0.505, 0.495]
    small = [0.498, 0.508, 0.488, 0.503, 0.501]  # wins 4 of 5 by 0.002, loses 1 by 0.006
    s = select(hand_comparison({"temperature": ts, "vector": small}))
    assert s.chosen.name == "temperature" and "preferred to the more complex vector" in s.reason
    clear = [0.480, 0.491, 0.471, 0.486, 0.474]  # wins every fold by about 0.02
    assert select(hand_comparison({"temperature": ts, "vector": clear})).chosen.name == "vector"
    difference = np.subtract(small, ts)
    assert difference.mean() > -CLEAR_FACTOR * difference.std(ddof=1) / np.sqrt(5)


def test_the_support_guard_weighs_tail_against_gain():
    nll = {"temperature": [0.50] * 5, "dirichlet": [0.40] * 5}
    reference = [0.50] * 5
    kept = select(hand_comparison(nll, {"dirichlet": [0.09] * 5}, reference))
    assert kept.chosen.name == "dirichlet"  # a tail of 0.09 against a gain of 0.10
    refused = select(hand_comparison(nll, {"dirichlet": [0.11] * 5}, reference))
    assert refused.chosen.name == "temperature"
    assert refused.excluded["dirichlet"].startswith("support guard: tail risk 0.11")
    assert select(hand_comparison(nll, {"dirichlet": [0.11] * 5})).chosen.name == "dirichlet"  # no reference


@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1500, 3000), st.integers(3, 20), st.one_of(st.floats(0.4, 0.8), st.floats(1.5, 3.0)),
       st.integers(0, 2**32 - 1))
def test_ts_like_sets_lose_nothing(n, k, temperature, seed):
    """Labels drawn from softmax(z / T): temperature scaling is the true model. The guards cost
    nothing: auto's test NLL is at most the unguarded rule's pick's (``guards=False``), and
    within 2% of the best candidate's in hindsight. (Not 1%: the cross-validation itself can
    be unlucky; on one 2237 x 6 set vector scaling beat TS in the folds by 2.8 standard errors
    of the paired differences and was 1.8% worse on test, guards or not.) T near 1 is left
    out: the logits are calibrated already and auto refuses, as before the guards, because no
    candidate beats the uncalibrated NLL."""
    rng = np.random.default_rng(seed)
    logits = 3.0 * rng.standard_normal((n + 20000, k))
    p = cal.softmax(logits / temperature)
    labels = np.minimum((p.cumsum(axis=1) < rng.random(len(p))[:, None]).sum(axis=1), k - 1)
    z, y, z_test, y_test = logits[:n], labels[:n], logits[n:], labels[n:]
    auto = cal.create("auto", {}).fit(z, y)
    ours = cal.nll(auto.predict_proba(z_test), y_test)
    test_nll = {c.name: held_out_nll(c.name, "logits", z, y, z_test, y_test) for c in default_candidates(n, k)}
    unguarded = select(auto.comparison_, guards=False).chosen.name
    assert ours <= test_nll[unguarded] * (1 + 1e-12)
    assert ours <= 1.02 * min(test_nll.values())
