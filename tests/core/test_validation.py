"""Bad input gets a ValueError that names the problem."""

import re

import numpy as np
import pytest

import calibration as cal

LOGITS = np.array([[1.0, 2.0, 0.5], [0.2, 0.1, 3.0], [2.0, 1.0, 0.0], [0.0, 0.5, 0.1]])
LABELS = np.array([1, 2, 1, 0])


@pytest.mark.parametrize(
    ("x", "labels", "message"),
    [
        (np.where(np.arange(12).reshape(4, 3) == 7, np.nan, LOGITS), LABELS, r"NaN or infinity \(first in row 2\)"),
        (np.where(np.arange(12).reshape(4, 3) == 0, np.inf, LOGITS), LABELS, r"first in row 0"),
        (LOGITS, np.array([1, 3, 0, 1]), r"labels must be in \[0, 3\); found 3 in row 1"),
        (LOGITS, np.array([1, -1, 0, 1]), r"found -1 in row 1"),
        (LOGITS, np.array([1.0, 2.0, 0.0, 1.0]), "labels must be integers"),
        (LOGITS, np.array([1, 2, 0]), "labels has 3 entries but the inputs have 4 rows"),
        (LOGITS[:1], LABELS[:1], "at least 2 samples"),
        (LOGITS[:, :1], LABELS * 0, "at least 2 classes"),
        (LOGITS[0], LABELS[:3], "must be a 2-D array"),
        ([[1.0, 2.0], [1.0]], [0, 1], "ragged"),
        ([["a", "b"], ["c", "d"]], [0, 1], "real numbers"),
        (np.zeros((0, 3)), np.zeros(0, dtype=int), "empty"),
        (LOGITS > 1, LABELS, "must hold real numbers, got dtype bool"),
        (LOGITS, np.array([1, 2**63 + 5, 0, 1], dtype=np.uint64), r"found 9223372036854775813 in row 1"),
    ],
)
def test_fit_errors_name_the_problem(x, labels, message):
    with pytest.raises(ValueError, match=message):
        cal.TemperatureScaling().fit(x, labels)


def test_k_must_not_change_between_fit_and_predict():
    ts = cal.TemperatureScaling().fit(LOGITS, LABELS)
    with pytest.raises(ValueError, match="fitted on 3 classes; the input has 2"):
        ts.predict_proba(LOGITS[:, :2])


@pytest.mark.parametrize("method", ["temperature", "ensemble_temperature"])
def test_an_overflowing_prediction_is_an_error_not_nan(method):
    fitted = cal.create(method).fit(LOGITS * 0.05, LABELS)  # under-confident: it multiplies logits up
    huge = np.array([[1.0, 2.0, 3.0], [1e308, -1e308, 0.0]])
    with pytest.raises(ValueError, match=r"row 1 overflow: its inputs \(largest magnitude 1e\+308\)"):
        fitted.predict_proba(huge)
    assert np.isfinite(fitted.predict_proba(huge[:1])).all()


def test_probabilities_are_checked_and_not_guessed():
    with pytest.raises(ValueError, match="rows must sum to 1"):
        cal.TemperatureScaling(input="probabilities").fit(LOGITS, LABELS)
    bad = np.array([[1.2, -0.2], [0.5, 0.5]])
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        cal.TemperatureScaling(input="probabilities").fit(bad, [0, 1])
    # logits that happen to look like probabilities are still logits
    looks_like = np.array([[0.2, 0.8], [0.6, 0.4], [0.3, 0.7]])
    ts = cal.TemperatureScaling().fit(looks_like, [1, 0, 0])
    assert not np.allclose(ts.predict_proba(looks_like), looks_like)


def test_unfitted_and_unknown():
    with pytest.raises(ValueError, match="not fitted"):
        cal.TemperatureScaling().predict_proba(LOGITS)
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        cal.create("nope")
    with pytest.raises(ValueError, match="unknown option"):
        cal.create("temperature", {"temprature": 2})
    with pytest.raises(ValueError, match="must be one of"):
        cal.create("temperature", {"objective": "mae"})
    with pytest.raises(ValueError, match="must be an integer"):
        cal.create("expectation_consistency", {"top_n": 1.5})
    with pytest.raises(ValueError, match="must be an integer"):
        cal.create("histogram_binning", {"n_bins": True})


def test_methods_needing_both_classes_say_so():
    scores = np.array([0.1, 2.0, -1.0, 0.4])
    with pytest.raises(ValueError, match="both classes"):
        cal.PlattScaling(input="scores").fit(scores, [1, 1, 1, 1])


def test_no_optimum_is_explained():
    all_correct = np.array([[3.0, 0.0], [0.0, 3.0], [2.0, 1.0]])
    with pytest.raises(ValueError, match="every label is a top-scoring class"):
        cal.TemperatureScaling().fit(all_correct, [0, 1, 0])
    all_wrong = np.array([[3.0, 0.0], [0.0, 3.0], [2.0, 1.0]])
    with pytest.raises(ValueError, match="keeps falling as T grows"):
        cal.TemperatureScaling().fit(all_wrong, [1, 0, 1])
    with pytest.raises(ValueError, match="accuracy 1 is not below"):
        cal.ExpectationConsistency().fit(all_correct, [0, 1, 0])
    with pytest.raises(ValueError, match=r"at most 1/2"):
        cal.ExpectationConsistency().fit(all_wrong, [1, 0, 1])
    with pytest.raises(ValueError, match="top_n must be below"):
        cal.ExpectationConsistency(top_n=2).fit(all_wrong, [1, 0, 1])


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(format_version=99),
        lambda d: d.update(method="platt"),
        lambda d: d["params"].update(temperature=-1.0),
        lambda d: d["params"].update(temperature="hot"),
        lambda d: d["params"].pop("temperature"),
        lambda d: d.pop("options"),
    ],
)
def test_from_dict_refuses_malformed_data(mutate):
    data = cal.TemperatureScaling().fit(LOGITS, LABELS).to_dict()
    mutate(data)
    with pytest.raises(ValueError):
        cal.from_dict(data)


def test_composition_options_are_validated():
    with pytest.raises(ValueError, match="at least one"):
        cal.Composition(steps=[])
    with pytest.raises(ValueError, match=r"steps\[1\]: unknown method"):
        cal.Composition(steps=[{"method": "temperature"}, {"method": "nope"}])
    with pytest.raises(ValueError, match="may not set 'input'"):
        cal.Composition(steps=[{"method": "temperature", "options": {"input": "logits"}}])


@pytest.mark.parametrize(("method", "options", "message"), [
    ("histogram_binning", {"n_bins": 10_001}, "option 'n_bins' must be <= 10000, got 10001"),
    ("class_temperature", {"grid_size": 1001}, "option 'grid_size' must be <= 1000"),
    ("class_temperature", {"max_rounds": 101}, "option 'max_rounds' must be <= 100"),
    ("class_temperature", {"n_bins": 1001}, "option 'n_bins' must be <= 1000"),
    ("dirichlet", {"max_iterations": 10_001}, "option 'max_iterations' must be <= 10000"),
    ("auto", {"folds": 21}, "option 'folds' must be <= 20"),
    ("auto", {"candidates": ["temperature"] * 21}, "option 'candidates' may list at most 20 items, got 21"),
    ("composition", {"steps": [{"method": "temperature"}] * 11}, "option 'steps' may list at most 10 items"),
])
def test_options_that_set_an_amount_of_work_have_a_maximum(method, options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        cal.create(method, options)
    cal.create(method, {name: value[:1] if isinstance(value, list) else value - 1 for name, value in options.items()})


def test_a_comparison_takes_at_most_20_candidates():
    methods = [{"method": "temperature", "name": f"t{i}"} for i in range(21)]
    with pytest.raises(ValueError, match="at most 20 candidates, got 21"):
        cal.prepare_comparison(100, 3, methods, 5, "logits")
    assert len(cal.prepare_comparison(100, 3, methods[:20], 5, "logits")) == 20


def test_every_option_that_sets_an_amount_of_work_has_a_maximum():
    for name in cal.METHODS:
        for option in cal.method_class(name).options_spec:
            if option.name in ("n_bins", "grid_size", "max_rounds", "max_iterations", "folds", "top_n"):
                assert option.maximum is not None, (name, option.name)
            if option.type is list:
                assert option.max_items is not None, (name, option.name)
