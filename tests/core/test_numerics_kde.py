"""Issue #23, item 5: KDE-ECE's default bandwidth is the Mix-n-Match code's σ̂·(2n)^(-1/5)."""

import numpy as np
import pytest

import calibration as cal
from calibration.metrics.kde import default_bandwidth


def test_default_bandwidth_is_the_mix_n_match_formula_by_hand():
    # confidences 0.6, 0.8 correct; 0.9, 0.7 wrong. σ̂ of {0.6, 0.8} (ddof 0) = 0.1, n = 4:
    # h = 0.1 · 8^(-1/5) = 0.065975395538..., not 1.06 · 0.1 · 4^(-1/5) = 0.080338...
    z = np.array([0.6, 0.9, 0.8, 0.7])
    c = np.array([1.0, 0.0, 1.0, 0.0])
    assert default_bandwidth(z, c) == pytest.approx(0.1 / 8 ** 0.2, rel=1e-12)
    assert default_bandwidth(z, c) == pytest.approx(0.065975395538, rel=1e-10)


def test_fewer_than_two_correct_samples_take_the_spread_of_all():
    z = np.array([0.5, 0.7, 0.9])
    c = np.array([0.0, 1.0, 0.0])
    assert default_bandwidth(z, c) == pytest.approx(np.sqrt(0.08 / 3) / 6 ** 0.2, rel=1e-12)


def test_kde_ece_uses_the_default_bandwidth():
    rng = np.random.default_rng(5)
    probs = cal.softmax(2 * rng.normal(size=(400, 4)))
    labels = rng.integers(0, 4, 400)
    confidence = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == labels).astype(float)
    h = np.std(confidence[correct == 1]) * (2 * 400) ** -0.2
    assert cal.kde_ece(probs, labels) == cal.kde_ece(probs, labels, bandwidth=float(h))
