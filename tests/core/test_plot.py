"""The readable reliability diagram (issue #22): Wilson intervals per bin, marker areas, weak
bins, the ECE's bootstrap interval, and the matplotlib figure that shows them."""

from __future__ import annotations

import numpy as np
import pytest

import calibration as cal
from calibration.reliability import (
    MAX_AREA,
    MIN_AREA,
    WEAK_COUNT,
    WEAK_OPACITY,
    ReliabilityBins,
    ece_interval,
    ece_interval_from_bins,
    legend_label,
    marker_areas,
    wilson_interval,
)


def test_wilson_interval_of_8_in_10_by_hand():
    # z = 1.9599640, z² = 3.8414588; centre = (0.8 + 0.1920729) / 1.3841459 = 0.7167402;
    # half = 1.9599640 / 1.3841459 * sqrt(0.016 + 0.0096036) = 0.2265777
    low, high = wilson_interval(8, 10)
    assert float(low) == pytest.approx(0.4901625, abs=2e-7)
    assert float(high) == pytest.approx(0.9433178, abs=2e-7)


def test_wilson_interval_at_the_edges_stays_in_the_unit_interval_and_is_not_empty():
    # p = 0: [0, z² / (n + z²)]; p = 1 mirrors it (3 of 3: z² / (3 + z²) = 0.561511)
    low, high = wilson_interval([0, 3], [3, 3])
    assert low[0] == 0 and high[0] == pytest.approx(3.841459 / (3 + 3.841459), abs=1e-6)
    assert high[1] == 1 and low[1] == pytest.approx(3 / (3 + 3.841459), abs=1e-6)
    low, high = wilson_interval(0, 0)
    assert np.isnan(low) and np.isnan(high)
    with pytest.raises(ValueError):
        wilson_interval(4, 3)
    with pytest.raises(ValueError):
        wilson_interval(1, 3, confidence=1.0)


@pytest.mark.parametrize("confidence", [0.8, 0.95, 0.99])
def test_wilson_interval_is_statsmodels_proportion_confint(confidence):
    proportion = pytest.importorskip("statsmodels.stats.proportion")
    successes = np.array([0, 1, 5, 17, 49, 50, 333, 999])
    trials = np.array([1, 7, 9, 40, 50, 50, 1000, 1000])
    low, high = wilson_interval(successes, trials, confidence)
    expected_low, expected_high = proportion.proportion_confint(successes, trials, alpha=1 - confidence,
                                                                method="wilson")
    np.testing.assert_allclose(low, expected_low, atol=1e-12)
    np.testing.assert_allclose(high, expected_high, atol=1e-12)


def test_marker_areas_grow_with_the_count():
    areas = marker_areas([0, 1, 50, 100])
    assert areas[0] == 0 and areas[-1] == MAX_AREA and MIN_AREA < areas[1] < areas[2] < areas[3]
    assert marker_areas([0, 0]).tolist() == [0, 0]


def test_bins_keep_the_non_empty_bins_with_their_intervals_and_weakness():
    diagram = {"bin_lower": [0.0, 0.5], "bin_upper": [0.5, 1.0], "count": [0, 40],
               "mean_confidence": [None, 0.8], "accuracy": [None, 0.75]}
    bins = ReliabilityBins.from_diagram(diagram)
    assert bins.count.tolist() == [40] and bins.weak.tolist() == [False]
    low, high = wilson_interval(30, 40)
    assert (bins.accuracy_low[0], bins.accuracy_high[0]) == (low, high)
    probs = np.array([[0.9, 0.1]] * (WEAK_COUNT - 1) + [[0.6, 0.4]] * (WEAK_COUNT + 1))
    labels = np.array([0] * (WEAK_COUNT - 1) + [1] * (WEAK_COUNT + 1))
    bins = ReliabilityBins.from_diagram(cal.reliability_diagram(probs, labels, n_bins=10))
    assert bins.count.tolist() == [WEAK_COUNT + 1, WEAK_COUNT - 1]
    assert bins.weak.tolist() == [False, True]
    assert bins.accuracy.tolist() == [0.0, 1.0] and bins.accuracy_high[1] == 1.0 and bins.accuracy_low[0] == 0.0


def test_the_ece_interval_is_the_bootstrap_of_calibration_ece(reference):
    logits, labels = reference
    probs = cal.softmax(logits)
    interval = ece_interval(probs, labels, n_resamples=100, seed=3)
    assert interval.estimate == pytest.approx(cal.ece(probs, labels), abs=1e-12)
    generic = cal.bootstrap_interval(cal.ece, probs, labels, n_resamples=100, seed=3)
    assert (interval.low, interval.high) == pytest.approx((generic.low, generic.high), abs=1e-12)
    assert interval.low < interval.estimate < interval.high


def test_the_interval_from_stored_bins_is_close_to_the_row_bootstrap(reference):
    logits, labels = reference
    probs = cal.softmax(logits)
    diagram = cal.reliability_diagram(probs, labels).to_dict()
    from_bins = ece_interval_from_bins(diagram["count"], diagram["mean_confidence"], diagram["accuracy"],
                                       n_resamples=400)
    from_rows = ece_interval(probs, labels, n_resamples=400)
    assert from_bins.estimate == pytest.approx(cal.ece(probs, labels), abs=1e-9)
    width = from_rows.high - from_rows.low
    assert from_bins.low == pytest.approx(from_rows.low, abs=0.25 * width)
    assert from_bins.high == pytest.approx(from_rows.high, abs=0.25 * width)
    with pytest.raises(ValueError):
        ece_interval_from_bins([0, 0], [None, None], [None, None])


def test_legend_label():
    assert legend_label("after", cal.Interval(0.0123, 0.01, 0.0151, 0.95, 200)) == \
        "after (ECE 1.23%) 95% CI 1.00–1.51%"


def test_the_svg_figure_shows_intervals_counts_on_a_log_scale_and_the_ece_interval(reference):
    from calibration.plot import reliability_figure

    logits, labels = reference
    before, after = cal.softmax(logits), cal.softmax(logits / 1.97)
    image = reliability_figure({"before": before, "after": after}, labels, format="svg").decode()
    for name, probs in (("before", before), ("after", after)):
        assert legend_label(name, ece_interval(probs, labels)) in image
    assert "count (log)" in image and "Wilson interval" in image and f"light: &lt; {WEAK_COUNT} samples" in image
    assert "mathdefault{10^{1}}" in image and "mathdefault{10^{2}}" in image   # the log axis's decades


def test_weak_bins_are_drawn_lighter_in_the_png():
    pytest.importorskip("PIL")
    from io import BytesIO

    from PIL import Image

    from calibration.plot import reliability_figure

    rng = np.random.default_rng(0)
    conf = np.concatenate([rng.uniform(0.55, 0.65, 2000), rng.uniform(0.92, 0.98, 5)])
    labels = (rng.random(conf.size) < conf).astype(int)
    probs = np.column_stack([1 - conf, conf])
    labels = np.where(labels == 1, 1, 0)
    image = Image.open(BytesIO(reliability_figure({"only": probs}, labels, n_bins=10))).convert("RGB")
    pixels = np.asarray(image).reshape(-1, 3)
    assert len(np.unique(pixels, axis=0)) > 50          # a drawing, not a blank canvas
    blue = np.array([0x1F, 0x77, 0xB4])
    on_white = (WEAK_OPACITY * blue + (1 - WEAK_OPACITY) * 255).astype(int)     # a weak bin's colour
    light = np.abs(pixels.astype(int) - on_white).sum(axis=1) < 12
    solid = np.abs(pixels.astype(int) - blue).sum(axis=1) < 12
    assert solid.sum() > 50 and light.sum() > 10, (solid.sum(), light.sum())
