"""Cross-validated comparison, the selection rule, and the ``auto`` method."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import calibration as cal
from calibration.comparison import (
    METRICS,
    Comparison,
    MethodResult,
    candidate,
    compare,
    default_candidates,
    stratified_folds,
)
from calibration.selection import TIE_TOLERANCE, select
from tests.helpers import DATASETS, load_split, make_reference_input, sweep


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=10, max_size=300), st.integers(2, 7), st.integers(0, 2**32 - 1))
def test_folds_are_stratified_and_seeded(labels, folds, seed):
    labels = np.array(labels)
    assignment = stratified_folds(labels, folds, seed)
    for c in np.unique(labels):
        counts = np.bincount(assignment[labels == c], minlength=folds)
        assert counts.max() - counts.min() <= 1
    np.testing.assert_array_equal(assignment, stratified_folds(labels, folds, seed))


def test_compare_is_deterministic_for_a_seed():
    logits, labels = make_reference_input(n=1500)
    methods = ["temperature", "isotonic_multiclass", {"method": "vector", "name": "vs"}]
    first, again, other = (compare(logits, labels, methods, folds=3, seed=s) for s in (7, 7, 8))
    for a, b, c in zip(first.results, again.results, other.results, strict=True):
        for metric in set(METRICS) - {"fit_seconds"}:
            assert a.per_fold[metric] == b.per_fold[metric]
        assert a.per_fold["nll"] != c.per_fold["nll"]
    assert [r.candidate.name for r in first.results] == ["temperature", "isotonic_multiclass", "vs"]
    # the held-out folds partition the data: the uncalibrated per-fold NLLs average to about the whole
    assert first.to_dict()["uncalibrated"]["nll"] == pytest.approx(cal.nll(cal.softmax(logits), labels), rel=1e-3)


def test_compare_refuses_bad_requests():
    logits, labels = make_reference_input(n=100)
    for kwargs, message in [
        ({"folds": 1}, "folds must be an integer from 2 to 20"),
        ({"methods": ["nope"]}, "unknown method 'nope'"),
        ({"methods": ["auto"]}, "cannot be a candidate of itself"),
        ({"methods": ["temperature", "temperature"]}, "names must be distinct"),
        ({"methods": []}, "at least one candidate"),
        ({"methods": [{"method": "temperature", "options": {"objective": "x"}}]}, "option 'objective'"),
        ({"methods": [{"method": "temperature", "options": {"input": "logits"}}]}, "without 'input'"),
    ]:
        with pytest.raises(ValueError, match=message):
            compare(logits, labels, **kwargs)
    with pytest.raises(ValueError, match="needs at least 10 samples"):
        compare(logits[:9], labels[:9], folds=5)


def test_default_candidates_scale_with_the_data():
    def names(n, k):
        return [c.name for c in default_candidates(n, k)]

    fast = ["temperature", "ensemble_temperature", "expectation_consistency", "isotonic_multiclass",
            "isotonic_one_vs_all", "irova_ts"]
    assert names(5000, 100) == [*fast, "vector"]  # Dirichlet needs 10 * 10100 samples
    assert names(5000, 10) == [*fast, "vector", "dirichlet"]  # 1100 <= 5000
    assert names(1099, 10) == [*fast, "vector"]
    assert names(199, 10) == fast
    assert names(100, 2) == [*fast, "platt", "vector", "dirichlet"]


def comparison(nll_by_method: dict, baseline=1.0, n=1000, k=10, preserving=(), failing=()) -> Comparison:
    """A hand-built comparison: per-fold NLL of each candidate (other metrics 0)."""
    results = []
    for name, folds in nll_by_method.items():
        per_fold = {m: [0.0] * len(folds) for m in METRICS}
        per_fold["nll"] = list(folds)
        results.append(MethodResult(candidate(name), name in preserving, per_fold, converged=name not in failing,
                                    floored_labels=sum(v == np.inf for v in folds)))  # inf: labels at the floor
    folds = len(next(iter(nll_by_method.values())))
    uncalibrated = {m: [0.0] * folds for m in METRICS}
    uncalibrated["nll"] = [baseline] * folds
    return Comparison(n, k, folds, 0, uncalibrated, results)


def test_select_takes_the_lowest_nll_beyond_noise():
    chosen = select(comparison({"temperature": [0.50, 0.52, 0.51], "vector": [0.40, 0.41, 0.42]}))
    assert chosen.chosen.name == "vector" and chosen.tied == ["vector"]
    assert "vector: cross-validated NLL 0.41000" in chosen.reason and "next: temperature 0.51000" in chosen.reason


def test_a_tie_goes_to_the_guideline_order():
    # paired differences (-0.003, +0.003, +0.001): mean 0.00033, standard error 0.00176, and below
    # 0.25% of 0.5 = 0.00125: tied, and ETS comes first in the guideline order
    s = select(comparison({"temperature": [0.500] * 3, "ensemble_temperature": [0.497, 0.503, 0.501]}))
    assert s.chosen.name == "ensemble_temperature" and sorted(s.tied) == ["ensemble_temperature", "temperature"]
    assert "Mix-n-Match guideline order" in s.reason
    # differences (-0.01, +0.03, +0.01): mean 0.01 within one standard error (0.0115) but 2% of the
    # NLL, beyond the practical band: no tie (both have one temperature, so no complexity guard)
    far = select(comparison({"expectation_consistency": [0.500] * 3,
                             "ensemble_temperature": [0.490, 0.530, 0.510]}))
    assert TIE_TOLERANCE < 0.01 / 0.5 and far.chosen.name == "expectation_consistency"
    assert far.tied == ["expectation_consistency"]
    # vector scaling is more complex: lower by 0.01 on average, but not by more than the standard
    # error (0.0115) of the paired differences, so ETS stays (issue #23 item 2)
    kept = select(comparison({"vector": [0.500] * 3, "ensemble_temperature": [0.490, 0.530, 0.510]}))
    assert kept.chosen.name == "ensemble_temperature" and "preferred to the more complex vector" in kept.reason


def test_much_data_puts_irova_ts_first_unless_accuracy_must_be_kept():
    nll = {"irova_ts": [0.5, 0.5, 0.5], "temperature": [0.5, 0.5, 0.5]}
    assert select(comparison(nll, n=5000, k=10)).chosen.name == "irova_ts"  # 500 per class
    assert select(comparison(nll, n=4999, k=10)).chosen.name == "temperature"
    kept = select(comparison(nll, n=5000, k=10, preserving=("irova_ts", "temperature")), preserve_accuracy=True)
    assert kept.chosen.name == "temperature"


def test_constraints_exclude_with_reasons():
    c = comparison(
        {"vector": [0.1] * 3, "matrix": [0.2] * 3, "isotonic_one_vs_all": [np.inf, 0.3, 0.3],
         "platt": [1.2] * 3, "temperature": [0.6] * 3},
        preserving=("temperature",), failing=("matrix",),
    )
    assert select(c).chosen.name == "vector"
    s = select(c, preserve_accuracy=True)
    assert s.chosen.name == "temperature"
    assert s.excluded == {
        "vector": "not accuracy-preserving",
        "matrix": "not accuracy-preserving",
        "isotonic_one_vs_all": "not accuracy-preserving",
        "platt": "not accuracy-preserving",
    }
    s = select(c)
    assert s.excluded["matrix"] == "its solver did not converge in every fold"
    assert s.excluded["isotonic_one_vs_all"].startswith("cross-validated NLL is infinite")
    assert s.excluded["platt"] == "cross-validated NLL 1.2 is not below the uncalibrated 1"
    with pytest.raises(ValueError, match="no candidate passes the constraints"):
        select(comparison({"vector": [1.5] * 3}))


@functools.cache
def auto_on(name: str):
    kind, x, y = load_split(name, "val")
    return cal.create("auto", {"input": kind}).fit(x, y)


@pytest.mark.slow
@pytest.mark.parametrize("name", sweep(DATASETS, ["cifar10_lenet5", "cifar100_densenet-bc-100"]))
def test_auto_is_within_two_percent_of_the_best_candidate_on_test(name):
    """Within 1% before issue #23 item 2; the simplicity guard keeps TS on cifar100_wrn16-4,
    where vector scaling loses 3 folds of 5 and ends 1.05% better on test in hindsight.
    The default run keeps one set of 10 classes and one of 100 (DenseNet, whose auto fit the
    Mix-n-Match test shares); cifar100_wrn16-4 (~6 s) and the rest run with --full-sweeps."""
    auto = auto_on(name)
    kind, x, y = load_split(name, "val")
    _, x_test, y_test = load_split(name, "test")
    test_nll = {}
    for c in default_candidates(len(y), x.shape[1]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cal.ConvergenceWarning)
            fitted = c.create(kind).fit(x, y)
        test_nll[c.name] = cal.nll(fitted.predict_proba(x_test), y_test)
    chosen = auto.summary()["chosen"]
    assert cal.nll(auto.predict_proba(x_test), y_test) == test_nll[chosen]
    assert test_nll[chosen] <= 1.02 * min(test_nll.values())
    assert test_nll[chosen] < cal.nll(cal.validate_inputs(x_test, kind).probabilities, y_test)


def test_the_mix_n_match_pattern_on_densenet():
    """cifar100 DenseNet, n = 5000, k = 100: IRM and IROvA-TS beat IROvA on ECE, KDE-ECE and
    calibration gain; ETS matches TS (calibration gain within 1e-4, ECE lower)."""
    result = auto_on("cifar100_densenet-bc-100").comparison_.result
    for metric, better in [("ece", min), ("kde_ece", min), ("calibration_gain", max)]:
        for good in ("isotonic_multiclass", "irova_ts"):
            assert better(result(good).mean(metric), result("isotonic_one_vs_all").mean(metric)) == \
                result(good).mean(metric)
    assert result("ensemble_temperature").mean("ece") <= result("temperature").mean("ece")
    assert abs(result("ensemble_temperature").mean("calibration_gain") -
               result("temperature").mean("calibration_gain")) < 1e-4


def test_auto_serialises_and_keeps_accuracy_when_asked():
    logits, labels = make_reference_input(n=2000)
    auto = cal.create("auto", {"preserve_accuracy": True, "folds": 3}).fit(logits, labels)
    assert auto.accuracy_preserving and auto.chosen_.accuracy_preserving
    assert auto.summary()["chosen"] in {r.candidate.name for r in auto.comparison_.results}
    assert "cross-validated NLL" in auto.summary()["reason"]
    np.testing.assert_array_equal(auto.predict(logits), logits.argmax(axis=1))
    again = cal.from_dict(auto.to_dict())
    np.testing.assert_array_equal(again.predict_proba(logits), auto.predict_proba(logits))
    assert again.summary() == auto.summary()
    with pytest.raises(ValueError, match="lacks the chosen name"):
        cal.from_dict({**auto.to_dict(), "params": {"chosen": auto.to_dict()["params"]["chosen"]}})
