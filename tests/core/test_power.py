"""The power analysis (``calibration.power``): no shift alarms at most as often as alpha, a huge
shift alarms at the delay the betting formula gives by hand, the expected drift equals a direct
count on the shifted rows, and the intervals are the textbook ones."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import softmax

import calibration as cal
from calibration.power import Shift, clopper_pearson, power, quantile_interval
from tests.helpers import binomtest, load_split

ALPHA, EPS, HALF_LIFE, MAX_BET = 0.01, 0.02, 1000.0, 0.5


def calibrated_population(seed: int, n: int = 20_000, k: int = 3):
    """Logits whose softmax is the true class distribution: labels drawn from it."""
    rng = np.random.default_rng(seed)
    logits = 2.0 * rng.standard_normal((n, k))
    p = softmax(logits, axis=1)
    labels = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    return logits, np.minimum(labels, k - 1)


def identity(logits):
    return softmax(logits, axis=1)


def test_no_shift_alarms_at_most_alpha_with_its_interval():
    logits, labels = calibrated_population(0)
    result = power(identity, logits, "logits", labels, Shift("temperature", 1.0), streams=300, max_labels=5000)
    for run in ("shifted", "null"):
        detected = result[run]["detected"]
        assert detected["labels"] == 5000
        assert detected["low"] <= ALPHA  # the false-alarm rate: its Clopper-Pearson interval reaches below alpha
        assert detected["rate"] <= ALPHA
        assert (detected["low"], detected["high"]) == pytest.approx(clopper_pearson(detected["alarms"], 300))
        assert result[run]["drift"]["visible_share"] == 0.0  # |mean confidence - accuracy| of the rows < 0.02
    p = identity(logits)
    gap = p.max(axis=1).mean() - (p.argmax(axis=1) == labels).mean()
    assert result["null"]["drift"]["confidence_gap_median"] == pytest.approx(abs(gap), abs=1e-12)


def by_hand_delay(r: float, c: np.ndarray, alpha: float = ALPHA) -> int:
    """The first row at which the average of the two betting games of ``calibration.monitoring``'s
    docstring reaches ``log(1/alpha)`` when every row has top-label residual ``r`` and class
    residuals ``c``: a plain scalar loop of its formulas."""
    keep = 2.0 ** (-1.0 / HALF_LIFE)
    m, s2, cm, cs2 = 0.0, 0.25, np.zeros(len(c)), np.full(len(c), 0.25)
    top = cls = 0.0
    for t in range(1, 100_000):
        lam = max(-MAX_BET, min(MAX_BET, math.copysign(max(abs(m) - EPS, 0.0), m) / s2))
        top += math.log1p(lam * r - abs(lam) * EPS)
        raw = np.sign(cm) * np.maximum(np.abs(cm) - EPS, 0.0) / cs2
        stakes = raw * min(1.0, MAX_BET / max(np.abs(raw).sum(), 1e-300))
        cls += math.log1p(float((stakes * c).sum() - EPS * np.abs(stakes).sum()))
        if np.logaddexp(top, cls) - math.log(2) >= math.log(1 / alpha):
            return t
        m, s2 = keep * m + (1 - keep) * r, keep * s2 + (1 - keep) * r * r
        cm, cs2 = keep * cm + (1 - keep) * c, keep * cs2 + (1 - keep) * c * c
    raise AssertionError("no alarm")


def test_a_huge_shift_alarms_at_the_delay_the_formula_gives():
    """Every row p = (0.99, 0.01) with label 0; swapping the two classes makes every label 1:
    residual 0.99 and class residuals (0.99, -0.99) on every row, so each stream alarms at the
    same, hand-computable row. Without the swap (residual -0.01, within the tolerance) never."""
    logits = np.tile(np.log([0.99, 0.01]), (50, 1))
    labels = np.zeros(50, dtype=np.int64)
    result = power(identity, logits, "logits", labels, Shift("swap", 1, swap_classes=(0, 1)), streams=40,
                   max_labels=2000)
    delay = by_hand_delay(0.99, np.array([0.99, -0.99]))
    assert delay < 100  # detected early
    shifted = result["shifted"]
    assert shifted["detected"]["alarms"] == 40
    assert shifted["detected"]["low"] == pytest.approx(0.025 ** (1 / 40))  # Clopper-Pearson at 40 of 40
    assert [(d["estimate"], d["low"], d["high"]) for d in shifted["delay"]] == [(delay, delay, delay)] * 3
    assert shifted["drift"]["confidence_gap_median"] == pytest.approx(0.99)
    assert result["null"]["detected"]["alarms"] == 0
    assert [d["estimate"] for d in result["null"]["delay"]] == [None, None, None]  # censored: more than 2000


@pytest.fixture(scope="module")
def resnet():
    _, val, labels = load_split("cifar10_resnet50_cross_entropy", "val")
    calibrator = cal.create("temperature", {"input": "logits"}).fit(val.astype(np.float64), labels)
    return val.astype(np.float64), labels, calibrator.predict_proba


def test_the_expected_drift_is_a_direct_count_on_the_shifted_rows(resnet):
    logits, labels, calibrate = resnet
    p = calibrate(logits)
    conf, pred = p.max(axis=1), p.argmax(axis=1)
    swapped = np.where(labels == 3, 5, np.where(labels == 5, 3, labels))
    result = power(calibrate, logits, "logits", labels, Shift("swap", 1, swap_classes=(3, 5)), streams=3,
                   max_labels=10)
    assert result["shifted"]["drift"]["confidence_gap_median"] == pytest.approx(
        abs(conf.mean() - (pred == swapped).mean()), abs=1e-12)
    class_gap = np.abs(p.mean(axis=0) - np.bincount(swapped, minlength=10) / len(labels)).max()
    assert result["shifted"]["drift"]["max_class_gap_median"] == pytest.approx(class_gap, abs=1e-12)
    # tweak-one: class 2 at prior 0.6, the others in their proportions; as row weights
    counts = np.bincount(labels, minlength=10)
    priors = np.where(np.arange(10) == 2, 0.0, counts / len(labels))
    priors = 0.4 * priors / priors.sum()
    priors[2] = 0.6
    weights = priors[labels] / counts[labels]
    result = power(calibrate, logits, "logits", labels, Shift("tweak_one", 0.6, shift_class=2), streams=3,
                   max_labels=10)
    assert result["shifted"]["drift"]["confidence_gap_median"] == pytest.approx(
        abs(weights @ (conf - (pred == labels))), abs=1e-12)
    # a temperature shift: the calibrator applied to the logits times 1.5
    hot = calibrate(1.5 * logits)
    result = power(calibrate, logits, "logits", labels, Shift("temperature", 1.5), streams=3, max_labels=10)
    assert result["shifted"]["drift"]["confidence_gap_median"] == pytest.approx(
        abs(hot.max(axis=1).mean() - (hot.argmax(axis=1) == labels).mean()), abs=1e-12)


def test_the_same_seed_gives_the_same_answer_and_the_label_free_signal_runs(resnet):
    logits, labels, calibrate = resnet
    shift = Shift("tweak_one", 0.5)
    first = power(calibrate, logits, "logits", labels, shift, streams=20, max_labels=3000, signal="label_free")
    assert first == power(calibrate, logits, "logits", labels, shift, streams=20, max_labels=3000,
                          signal="label_free")
    assert first["reference_rows"] == first["rows"] == 2500
    assert first["monitor_tolerance"] > EPS  # widened by the reference's bound
    assert first["shifted"]["detected"]["rate"] == 1.0  # one class at half the stream: seen without labels
    assert first["null"]["detected"]["alarms"] == 0


def test_clopper_pearson_is_scipys_exact_interval():
    for k, n in ((0, 10), (3, 10), (10, 10), (17, 400)):
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        assert clopper_pearson(k, n) == pytest.approx((ci.low, ci.high), abs=1e-12)


def test_quantile_interval_by_hand():
    delays = np.arange(1, 101, dtype=np.float64)  # 100 streams, delays 1..100
    # Binomial(100, 1/2): 2.5% and 97.5% points 40 and 60, so T_(40) and T_(61)
    assert quantile_interval(delays, 0.5) == {"q": 0.5, "estimate": 50, "low": 40, "high": 61}
    delays[55:] = np.inf  # 45 streams never alarmed
    assert quantile_interval(delays, 0.5) == {"q": 0.5, "estimate": 50, "low": 40, "high": None}
    assert quantile_interval(delays, 0.9)["estimate"] is None


@pytest.mark.parametrize(("shift", "signal"), [
    (Shift("temperature", 0.0), "labelled"), (Shift("tweak_one", 1.0), "labelled"),
    (Shift("swap", 6), "labelled"), (Shift("swap", 1, swap_classes=(2, 2)), "labelled"),
    (Shift("tweak_one", 0.5, shift_class=10), "labelled"), (Shift("swap", 1), "label_free"),
    (Shift("shear", 1.0), "labelled"), (Shift("temperature", 1.0), "psychic")])
def test_bad_requests_are_value_errors(resnet, shift, signal):
    logits, labels, calibrate = resnet
    with pytest.raises(ValueError):
        power(calibrate, logits, "logits", labels, shift, streams=2, max_labels=10, signal=signal)
