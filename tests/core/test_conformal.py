"""Conformal prediction sets (``calibration.conformal``): hand-computed scores, thresholds and sets,
plain-data round trips, the finite-sample coverage band (hypothesis), class-conditional coverage,
ACI/DtACI long-run coverage under a shift and the coverage alarm's false-alarm rate and power."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import calibration as cal
from calibration.conformal import all_scores, label_scores, quantile_rank

ROW = np.array([[0.5, 0.3, 0.2]])
CALIBRATION = np.array([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.1, 0.1, 0.8]])
CALIBRATION_LABELS = np.array([0, 1, 1, 2])  # LAC scores 0.3, 0.7, 0.5, 0.2


def test_scores_by_hand():
    np.testing.assert_allclose(all_scores(ROW, "lac"), [[0.5, 0.7, 0.8]])
    np.testing.assert_allclose(all_scores(ROW, "aps"), [[0.5, 0.8, 1.0]])
    np.testing.assert_allclose(all_scores(ROW, "aps", u=np.array([0.5])), [[0.25, 0.65, 0.9]])
    np.testing.assert_allclose(all_scores(ROW, "raps", k_reg=1, lam=0.1), [[0.5, 0.9, 1.2]])
    # ties: the lower index ranks first
    np.testing.assert_allclose(all_scores(np.array([[0.4, 0.4, 0.2]]), "aps"), [[0.4, 0.8, 1.0]])
    np.testing.assert_allclose(label_scores(CALIBRATION, CALIBRATION_LABELS, "lac"), [0.3, 0.7, 0.5, 0.2])


def test_quantile_by_hand():
    scores = np.arange(9, 0, -1) / 10  # 0.9 ... 0.1, n = 9
    assert quantile_rank(9, 0.2) == 8 and cal.conformal_quantile(scores, 0.2) == 0.8
    assert cal.conformal_quantile(scores, 0.5) == 0.5  # rank ceil(10 * 0.5) = 5
    assert quantile_rank(9, 0.05) == 10 and cal.conformal_quantile(scores, 0.05) == math.inf
    with pytest.raises(ValueError, match="alpha"):
        cal.conformal_quantile(scores, 1.0)


def test_sets_by_hand():
    predictor = cal.SetPredictor.fit(CALIBRATION, CALIBRATION_LABELS, score="lac", alphas=[0.2, 0.4, 0.1])
    assert predictor.thresholds[:2] == [pytest.approx(0.7), 0.5]  # ranks ceil(5 * 0.8) = 4, ceil(5 * 0.6) = 3
    assert predictor.thresholds[2] == math.inf  # rank ceil(5 * 0.9) = 5 > 4: all classes
    row = np.array([[0.5, 0.35, 0.15]])  # LAC scores 0.5, 0.65, 0.85
    assert predictor.predict_sets(row).tolist() == [[True, True, False]]
    assert predictor.predict_sets(row, alpha=0.4).tolist() == [[True, False, False]]
    assert predictor.predict_sets(row, alpha=0.1).tolist() == [[True, True, True]]
    with pytest.raises(ValueError, match="no fitted level"):
        predictor.predict_sets(row, alpha=0.3)


def test_class_conditional_by_hand():
    predictor = cal.SetPredictor.fit(CALIBRATION, CALIBRATION_LABELS, score="lac", alphas=[0.4],
                                     class_conditional=True)
    # class 1 has scores 0.7, 0.5 (n = 2, rank ceil(3 * 0.6) = 2); classes 0 and 2 one row each (rank 2 > 1)
    assert predictor.counts == [1, 2, 1]
    assert predictor.thresholds == [[math.inf, 0.7, math.inf]]
    assert predictor.predict_sets(np.array([[0.9, 0.05, 0.05]])).tolist() == [[True, False, True]]


def test_plain_data_round_trip():
    predictor = cal.SetPredictor.fit(CALIBRATION, CALIBRATION_LABELS, score="raps", alphas=[0.2, 0.1],
                                     k_reg=1, lam=0.1, randomized=True, uniforms=np.array([0.1, 0.9, 0.5, 0.3]))
    text = predictor.to_json()
    assert json.loads(text)["thresholds"][1] is None  # +inf is stored as null
    copy = cal.SetPredictor.from_json(text)
    assert copy == predictor
    probs = cal.softmax(np.random.default_rng(1).normal(size=(50, 3)))
    np.testing.assert_array_equal(copy.predict_sets(probs, seed=3), predictor.predict_sets(probs, seed=3))
    broken = json.loads(text)
    broken["thresholds"][0] = "0.5"
    with pytest.raises(ValueError, match="threshold"):
        cal.SetPredictor.from_dict(broken)
    with pytest.raises(ValueError, match="split_conformal"):
        cal.SetPredictor.from_dict({**json.loads(text), "format_version": 2})


@pytest.mark.parametrize(("options", "match"), [
    ({"alphas": [0.0]}, "alphas"), ({"alphas": [0.1, 0.1]}, "twice"), ({"score": "thr"}, "score"),
    ({"k_reg": 4}, "k_reg"), ({"lam": -1.0}, "lam"), ({"randomized": True, "score": "aps"}, "uniforms"),
    ({"alphas": [0.1] * 17}, "at most"), ({"colour": 1}, "unknown"),
])
def test_bad_options_are_value_errors(options, match):
    with pytest.raises(ValueError, match=match):
        cal.SetPredictor.fit(CALIBRATION, CALIBRATION_LABELS, **options)


def test_bad_inputs_are_value_errors():
    with pytest.raises(ValueError, match="labels"):
        cal.SetPredictor.fit(CALIBRATION, np.array([0, 1, 3, 2]))
    predictor = cal.SetPredictor.fit(CALIBRATION, CALIBRATION_LABELS)
    with pytest.raises(ValueError, match="classes"):
        predictor.predict_sets(np.full((2, 4), 0.25))
    with pytest.raises(ValueError, match="sum to 1"):
        predictor.predict_sets(np.array([[0.5, 0.5, 0.5]]))


def _synthetic(rng, shape: tuple, k: int, temperature: float = 1.0, scale: float = 2.0):
    """Probabilities softmax(z) and labels drawn from softmax(z / temperature): exchangeable rows."""
    z = scale * rng.standard_normal((*shape, k))
    truth = cal.softmax(z / temperature).cumsum(axis=-1)
    labels = np.minimum((truth < rng.random(shape)[..., None]).sum(axis=-1), k - 1)
    return cal.softmax(z), labels


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(10, 300), alpha=st.floats(0.03, 0.4),
       k=st.integers(2, 8), score=st.sampled_from(["lac", "aps", "raps", "aps_randomized"]))
def test_split_conformal_coverage_lies_in_the_finite_sample_band(seed, n, alpha, k, score):
    """Averaged over 300 independent draws of n calibration and 40 test rows: the mean coverage is at
    least 1 - alpha and, for the scores without ties (LAC, randomised APS), below 1 - alpha + 1/(n + 1),
    within 4 standard errors. (Non-randomised APS/RAPS scores have atoms: a label ranked last scores
    exactly 1 (+ its penalty), so only the lower bound holds for them.)"""
    rng = np.random.default_rng(seed)
    reps, m = 300, 40
    p, y = _synthetic(rng, (reps, n + m), k, temperature=rng.uniform(0.5, 2.0))
    flat_p, flat_y = p.reshape(-1, k), y.ravel()
    u = rng.random(len(flat_y)) if score == "aps_randomized" else None
    s = label_scores(flat_p, flat_y, score[:4].rstrip("_"), k_reg=1, lam=0.05, u=u).reshape(reps, n + m)
    rank = quantile_rank(n, alpha)
    q = np.sort(s[:, :n], axis=1)[:, rank - 1] if rank <= n else np.full(reps, np.inf)
    coverage = (s[:, n:] <= q[:, None]).mean(axis=1)
    error = coverage.std(ddof=1) / math.sqrt(reps)
    assert coverage.mean() >= 1 - alpha - 4 * error
    if score in ("lac", "aps_randomized"):
        assert coverage.mean() <= 1 - alpha + 1 / (n + 1) + 4 * error


def test_class_conditional_coverage_per_class():
    """A hard class (its logit barely raised) is under-covered by the marginal sets and covered at
    1 - alpha by the class-conditional ones (mean over 200 draws, each class, 4 standard errors)."""
    rng = np.random.default_rng(7)
    reps, n, m, k, alpha = 200, 300, 300, 3, 0.1
    y = rng.integers(0, k, (reps, n + m))
    z = rng.standard_normal((reps, n + m, k)) + np.array([3.0, 3.0, 0.5])[y][..., None] * np.eye(k)[y]
    p = cal.softmax(z)
    per_class = {True: [], False: []}
    for r in range(reps):
        for mondrian in (True, False):
            predictor = cal.SetPredictor.fit(p[r, :n], y[r, :n], score="lac", alphas=[alpha],
                                             class_conditional=mondrian)
            covered = predictor.predict_sets(p[r, n:])[np.arange(m), y[r, n:]]
            per_class[mondrian].append([covered[y[r, n:] == j].mean() for j in range(k)])
    mondrian, marginal = np.array(per_class[True]), np.array(per_class[False])
    error = mondrian.std(axis=0, ddof=1) / math.sqrt(reps)
    assert np.all(mondrian.mean(axis=0) >= 1 - alpha - 4 * error)
    assert marginal.mean(axis=0)[2] < 1 - alpha - 0.1  # the marginal sets miss the hard class


def _shifted_stream(rng, n_calibration=2000, n_stream=8000, k=10):
    """Calibration rows with labels from softmax(z); a stream whose second half draws its labels from
    softmax(z / 3) (the model turned over-confident: a temperature change)."""
    pc, yc = _synthetic(rng, (n_calibration,), k)
    before, y_before = _synthetic(rng, (n_stream // 2,), k)
    after, y_after = _synthetic(rng, (n_stream // 2,), k, temperature=3.0)
    return pc, yc, np.concatenate([before, after]), np.concatenate([y_before, y_after])


def test_aci_and_dtaci_keep_long_run_coverage_under_a_temperature_shift():
    rng = np.random.default_rng(11)
    alpha, gamma = 0.1, 0.01
    pc, yc, stream, labels = _shifted_stream(rng)
    half = len(labels) // 2
    fixed = cal.SetPredictor.fit(pc, yc, score="aps", alphas=[alpha]).predict_sets(stream)
    fixed_covered = fixed[np.arange(len(labels)), labels]
    assert fixed_covered[half:].mean() < 1 - alpha - 0.1  # split conformal breaks after the shift
    aci = cal.AdaptiveConformal(alpha, gamma, score="aps").fit(pc, yc)
    record = aci.update(stream, labels)
    miscoverage = 1 - record.covered.mean()
    # Gibbs & Candes 2021, Proposition 4.1: a bound for every sequence
    assert abs(miscoverage - alpha) <= (max(alpha, 1 - alpha) + gamma) / (gamma * len(labels))
    assert abs(miscoverage - alpha) <= 0.01 and abs(1 - record.covered[half:].mean() - alpha) <= 0.015
    dtaci = cal.DtACI(alpha, score="aps").fit(pc, yc)
    dt_record = dtaci.update(stream, labels)
    assert abs(1 - dt_record.covered.mean() - alpha) <= 0.01
    assert abs(1 - dt_record.covered[half:].mean() - alpha) <= 0.015


def test_online_state_round_trips_and_continues_identically():
    rng = np.random.default_rng(5)
    pc, yc, stream, labels = _shifted_stream(rng, 500, 600, 4)
    for online in (cal.AdaptiveConformal(0.1, 0.02, score="raps", k_reg=1, lam=0.1), cal.DtACI(0.2, score="lac")):
        online.fit(pc, yc).update(stream[:300], labels[:300])
        copy = type(online).from_dict(json.loads(json.dumps(online.to_dict())))
        ours, theirs = online.update(stream[300:], labels[300:]), copy.update(stream[300:], labels[300:])
        np.testing.assert_array_equal(ours.alpha, theirs.alpha)
        np.testing.assert_array_equal(ours.set_size, theirs.set_size)
        np.testing.assert_array_equal(online.predict_sets(stream[:5]), copy.predict_sets(stream[:5]))


def test_online_levels_outside_the_unit_interval_give_full_and_empty_sets():
    aci = cal.AdaptiveConformal(0.1, 0.5, score="lac").fit(CALIBRATION, CALIBRATION_LABELS)
    aci.level = -0.2
    assert aci.predict_sets(ROW).all()
    aci.level = 1.0
    assert not aci.predict_sets(ROW).any()


def test_coverage_alarm_false_alarms_and_delay():
    """Miscoverage indicators Bernoulli(alpha) (no shift): at most delta of 2000 streams of 5000 rows
    alarm (Ville's inequality; in fact none do here). Bernoulli(alpha + 0.1) after 1000 rows: every
    stream alarms, within 1500 rows of the change."""
    rng = np.random.default_rng(3)
    streams, horizon, alpha, delta = 2000, 5000, 0.1, 0.05
    null = cal.CoverageAlarm(alpha, tolerance=0.02, delta=delta, shape=(streams,))
    null.update(rng.random((streams, horizon)) < alpha)
    assert null.alarmed.mean() <= delta
    shifted = cal.CoverageAlarm(alpha, tolerance=0.02, delta=delta, shape=(200,))
    rates = np.where(np.arange(horizon) < 1000, alpha, alpha + 0.1)
    shifted.update(rng.random((200, horizon)) < rates)
    assert shifted.alarmed.all() and (shifted.alarm_at > 1000).all() and (shifted.alarm_at - 1000 < 1500).all()
    with pytest.raises(ValueError, match="0/1"):
        cal.CoverageAlarm().update(np.array([0.5]))


def test_dtaci_mean_choice_serves_the_weighted_level_and_bad_settings_are_value_errors():
    rng = np.random.default_rng(9)
    pc, yc, stream, labels = _shifted_stream(rng, 500, 400, 4)
    dtaci = cal.DtACI(0.1, score="lac", choice="mean").fit(pc, yc)
    dtaci.update(stream, labels)
    assert dtaci.level == pytest.approx(float(dtaci.weights @ dtaci.expert_levels), abs=1e-15)
    assert cal.DtACI.from_dict(json.loads(json.dumps(dtaci.to_dict()))).choice == "mean"
    for bad in ({"choice": "vote"}, {"gammas": []}, {"interval": 0}, {"seed": -1}):
        with pytest.raises(ValueError):
            cal.DtACI(0.1, **bad)
    with pytest.raises(ValueError, match="fit"):
        cal.AdaptiveConformal(0.1).update(stream[:2], labels[:2])
    with pytest.raises(ValueError, match="tolerance"):
        cal.CoverageAlarm(alpha=0.5, tolerance=0.6)


def test_coverage_alarm_round_trips_as_plain_data_and_goes_on_as_one_unbroken_stream():
    """Stored after the first half and loaded, the alarm ends where one that saw the whole stream ends."""
    rng = np.random.default_rng(3)
    stream = (rng.random(6000) < np.r_[np.full(3000, 0.1), np.full(3000, 0.2)]).astype(float)
    whole = cal.CoverageAlarm(0.1, tolerance=0.02, delta=0.01).update(stream)
    first = cal.CoverageAlarm(0.1, tolerance=0.02, delta=0.01).update(stream[:3000])
    data = json.loads(json.dumps(first.to_dict()))
    resumed = cal.CoverageAlarm.from_dict(data).update(stream[3000:])
    assert whole.alarmed and int(resumed.alarm_at) == int(whole.alarm_at) > 3000
    assert float(resumed.log_wealth) == pytest.approx(float(whole.log_wealth), rel=1e-12)
    numbers = [{k: v for k, v in alarm.to_dict().items() if k != "method"} for alarm in (resumed, whole)]
    assert numbers[0] == pytest.approx(numbers[1], rel=1e-12)
    with pytest.raises(ValueError, match="not a stored coverage alarm"):
        cal.CoverageAlarm.from_dict({**data, "method": "drift"})
    with pytest.raises(ValueError, match="single-stream"):
        cal.CoverageAlarm(shape=(2,)).to_dict()
