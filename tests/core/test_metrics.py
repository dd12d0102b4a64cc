"""Metrics: hand-computed cases, edge cases, other libraries' conventions, KDE-ECE accuracy."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.metrics import brier_score_loss, log_loss

import calibration as cal
from calibration.metrics.binned import equal_width_bin
from tests.helpers import load_split, synthetic_binary, true_binary_ece

BINNED = [cal.ece, cal.mce, cal.adaptive_ece, cal.classwise_ece]
ALL = [*BINNED, cal.brier, cal.nll, cal.accuracy, cal.kde_ece, cal.expectation_consistency_gap]


def test_ece_hand_computed_with_gaps_of_both_signs():
    probs = np.array([[0.2, 0.8], [0.7, 0.3], [0.55, 0.45], [0.9, 0.1], [1.0, 0.0]])
    labels = np.array([1, 0, 1, 0, 0])
    conf = probs.max(axis=1)
    correct = probs.argmax(axis=1) == labels
    assert conf.tolist() == [0.8, 0.7, 0.55, 0.9, 1.0]
    assert correct.tolist() == [True, True, False, True, True]
    # 4 bins (lo, hi]: (.5, .75] holds .7 (1), .55 (0); (.75, 1] holds .8, .9, 1.0 (all right)
    gap_mid = (0.7 + 0.55) - 1.0
    gap_top = (0.8 + 0.9 + 1.0) - 3.0
    assert cal.ece(probs, labels, n_bins=4) == pytest.approx((abs(gap_mid) + abs(gap_top)) / 5)
    assert cal.mce(probs, labels, n_bins=4) == pytest.approx(max(abs(gap_mid) / 2, abs(gap_top) / 3))
    l2 = np.sqrt((gap_mid**2 / 2 + gap_top**2 / 3) / 5)
    assert cal.ece(probs, labels, n_bins=4, norm=2) == pytest.approx(l2)


def test_zero_confidence_is_in_the_first_bin_and_one_in_the_last():
    diagram = cal.reliability_diagram(np.array([0.0, 1.0]), [0, 1], n_bins=4)
    # binary input: top-label confidence of [1, 0] and [0, 1] is 1.0 for both
    assert diagram.count.tolist() == [0, 0, 0, 2]
    assert cal.classwise_ece(np.array([0.0, 1.0]), [0, 1], n_bins=4) == 0.0


def test_adaptive_ece_uses_array_split_of_the_sorted_confidences():
    probs = np.array([0.9, 0.6, 0.8, 0.7, 0.95])
    labels = np.array([1, 1, 0, 1, 1])
    # sorted confidences .6 .7 .8 .9 .95 split into 2 bins: [.6 .7 .8] and [.9 .95]
    expected = (abs(0.6 + 0.7 + 0.8 - 2) + abs(0.9 + 0.95 - 2)) / 5
    assert cal.adaptive_ece(probs, labels, n_bins=2) == pytest.approx(expected)


@given(st.lists(st.tuples(st.sampled_from([0.5, 0.6, 0.75, 0.9, 1.0]), st.booleans()), min_size=1, max_size=60),
       st.integers(1, 20), st.sampled_from([1, 2]))
def test_equal_count_bins_split_runs_of_ties_in_their_original_order(rows, n_bins, norm):
    # heavy ties with mixed correctness: bins must be np.array_split of the stable argsort
    scores = np.array([p for p, _ in rows])
    labels = np.array([int(right) for _, right in rows])  # the top label is class 1 (or 0 at 0.5)
    confidence, correct = np.maximum(scores, 1 - scores), (np.where(scores > 0.5, 1, 0) == labels) * 1.0
    parts = np.array_split(np.argsort(confidence, kind="stable"), n_bins)
    gaps = np.array([np.sum(confidence[i] - correct[i]) for i in parts])
    sizes = np.array([len(i) for i in parts])
    full = sizes > 0
    n = len(rows)
    expected = np.abs(gaps).sum() / n if norm == 1 else np.sqrt(np.sum(gaps[full] ** 2 / sizes[full]) / n)
    assert cal.adaptive_ece(scores, labels, n_bins=n_bins, norm=norm) == pytest.approx(expected, abs=1e-12)
    diagram = cal.reliability_diagram(scores, labels, n_bins=n_bins, strategy="quantile")
    assert diagram.count.tolist() == sizes.tolist()
    for b, i in enumerate(parts):
        if len(i):
            assert diagram.accuracy[b] == pytest.approx(correct[i].mean(), abs=1e-12)
            assert (diagram.bin_lower[b], diagram.bin_upper[b]) == (confidence[i].min(), confidence[i].max())


@pytest.mark.parametrize("metric", ALL)
def test_negative_zero_entries_count_as_zero(metric):
    probs = np.array([[0.0, 0.3, 0.7], [0.5, 0.0, 0.5], [0.0, 1.0, 0.0], [0.2, 0.8, 0.0]])
    labels = [2, 0, 1, 0]
    assert metric(np.where(probs == 0, -0.0, probs), labels) == metric(probs, labels)


def test_brier_and_nll_agree_with_scikit_learn(reference):
    logits, labels = reference
    probs = cal.softmax(logits)
    assert cal.nll(probs, labels) == pytest.approx(log_loss(labels, probs), rel=1e-12)
    binary = probs[:, :2] / probs[:, :2].sum(axis=1, keepdims=True)
    y = (labels[:] % 2)
    # scikit-learn's binary Brier is per positive-class probability; ours sums both classes
    assert cal.brier(binary[:, 1], y) == pytest.approx(2 * brier_score_loss(y, binary[:, 1]), rel=1e-12)


def test_top_n_accuracy_breaks_ties_by_lower_index():
    probs = np.array([[0.25, 0.25, 0.25, 0.25]])
    assert cal.top_n_accuracy(probs, [1], n=2) == 1.0
    assert cal.top_n_accuracy(probs, [2], n=2) == 0.0
    assert cal.accuracy(probs, [0]) == 1.0


def test_calibration_gain_is_the_drop_in_brier(reference):
    logits, labels = reference
    raw, calibrated = cal.softmax(logits), cal.softmax(logits / 1.97)
    gain = cal.calibration_gain(raw, calibrated, labels)
    assert gain == pytest.approx(cal.brier(raw, labels) - cal.brier(calibrated, labels))
    assert gain > 0


@pytest.mark.parametrize("metric", ALL)
@pytest.mark.parametrize(
    ("probs", "labels"),
    [
        (np.array([[0.3, 0.7]]), [1]),  # one sample
        (np.array([[0.9, 0.1], [0.2, 0.8]]), [0, 1]),  # all correct
        (np.array([[0.9, 0.1], [0.2, 0.8]]), [1, 0]),  # all wrong
        (np.array([[0.5, 0.3, 0.2], [0.6, 0.2, 0.2]]), [0, 1]),  # class 2 absent
        (np.array([0.1, 0.8, 0.6]), [0, 1, 1]),  # binary scores (n,)
        (np.array([[1.0, 0.0], [0.0, 1.0]]), [0, 1]),  # exact zeros and ones
        (np.array([[0.25, 0.75], [0.5, 0.5]], dtype=np.float16), [1, 0]),  # float16
    ],
    ids=["one-sample", "all-correct", "all-wrong", "absent-class", "binary", "zeros-ones", "float16"],
)
def test_edge_cases_give_defined_values(metric, probs, labels):
    value = metric(probs, labels)
    assert not np.isnan(value)


def test_nll_of_an_impossible_label_is_the_floor_s_bound_not_infinite():
    """The label's probability is floored at EPSILON = 2**-52, as scikit-learn's log_loss clips."""
    assert cal.nll(np.array([[1.0, 0.0]]), [1]) == 52 * np.log(2)


@pytest.mark.parametrize("metric", ALL)
def test_metric_errors(metric):
    with pytest.raises(ValueError, match="empty"):
        metric(np.zeros((0, 3)), np.zeros(0, dtype=int))
    with pytest.raises(ValueError, match="rows must sum to 1"):
        metric(np.array([[0.5, 0.6]]), [0])
    with pytest.raises(ValueError, match="NaN or infinity"):
        metric(np.array([[np.nan, 0.5]]), [0])
    with pytest.raises(ValueError, match="labels must be in"):
        metric(np.array([[0.5, 0.5]]), [2])
    # negative entries, large (selected by classwise_ece's bit-pattern test) and tiny
    for row in ([1.2, -0.2, 0.0], [0.5, 0.5 + 1e-17, -1e-17]):
        with pytest.raises(ValueError, match=r"must lie in \[0, 1\] \(first negative entry in row 1\)"):
            metric(np.array([[0.2, 0.3, 0.5], row]), [0, 1])


@given(st.integers(1, 200), st.lists(st.floats(0.0, 1.0), min_size=1, max_size=50))
def test_equal_width_bin_is_searchsorted_on_the_linspace_edges(n_bins, values):
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    # the values drawn, and every edge with its two neighbouring floats
    v = np.clip(np.concatenate([values, edges, np.nextafter(edges, 2), np.nextafter(edges, -1)]), 0, 1)
    expected = np.clip(np.searchsorted(edges, v, side="left") - 1, 0, n_bins - 1)
    np.testing.assert_array_equal(equal_width_bin(v, n_bins), expected)


def test_classwise_ece_hand_computed():
    # classes x bins (4 bins: (0, .25], (.25, .5], (.5, .75], (.75, 1]); labels 0, 1, 1
    p = np.array([[0.8, 0.2, 0.0], [0.3, 0.6, 0.1], [0.1, 0.4, 0.5]])
    # class 0: bin0 {0.1: y0} -> |0.1 - 0|, bin1 {0.3: 0} -> 0.3, bin3 {0.8: 1} -> 0.2      = 0.6
    # class 1: bin0 {0.2: 0} -> 0.2, bin1 {0.4: 1} -> 0.6, bin2 {0.6: 1} -> 0.4            = 1.2
    # class 2: bin0 {0.0, 0.1: 0, 0} -> 0.1, bin1 {0.5: 0} -> 0.5                          = 0.6
    assert cal.classwise_ece(p, [0, 1, 1], n_bins=4) == pytest.approx((0.6 + 1.2 + 0.6) / (3 * 3), abs=1e-15)


def test_reliability_diagram_sums_to_ece(reference):
    logits, labels = reference
    probs = cal.softmax(logits / 1.5)
    for strategy, metric in [("uniform", cal.ece), ("quantile", cal.adaptive_ece)]:
        d = cal.reliability_diagram(probs, labels, strategy=strategy)
        full = d.count > 0
        assert d.count.sum() == len(labels)
        weighted = np.sum(d.count[full] / len(labels) * np.abs(d.gap[full]))
        assert weighted == pytest.approx(metric(probs, labels), abs=1e-12)
        as_dict = d.to_dict()
        assert len(as_dict["count"]) == 15 and as_dict["strategy"] == strategy


def test_bootstrap_interval_is_seeded_and_brackets_the_estimate(reference):
    logits, labels = reference
    probs = cal.softmax(logits / 1.9)
    a = cal.bootstrap_interval(cal.ece, probs, labels, n_resamples=200, seed=1)
    b = cal.bootstrap_interval(cal.ece, probs, labels, n_resamples=200, seed=1)
    assert a == b
    assert a.low < a.estimate < a.high
    assert a.estimate == cal.ece(probs, labels)
    gain = cal.bootstrap_interval(cal.calibration_gain, cal.softmax(logits), probs, labels,
                                  n_resamples=100)
    assert gain.low > 0


@pytest.mark.parametrize(("b0", "b1"), [(0.5, -1.5), (0.2, -1.9)])
def test_kde_ece_is_closer_to_the_truth_than_binning(b0, b1):
    """A seeded, smaller version of benchmarks/kde_ece_accuracy.py (1000 repetitions there)."""
    truth = true_binary_ece(b0, b1)
    rng = np.random.default_rng(2024)
    for n in (64, 256):
        kde_error = bin_error = 0.0
        for _ in range(150):
            probs, labels = synthetic_binary(rng, n, b0, b1)
            kde_error += abs(cal.kde_ece(probs, labels) - truth)
            # the 15-bin histogram estimator of the same (class-1) quantity
            bin_error += abs(cal.classwise_ece(probs, labels) - truth)
        assert kde_error < bin_error


def test_kde_ece_converges_to_the_true_value():
    truth = true_binary_ece(0.5, -1.5)
    probs, labels = synthetic_binary(np.random.default_rng(0), 200_000, 0.5, -1.5)
    assert cal.kde_ece(probs, labels) == pytest.approx(truth, abs=2e-3)


def test_kde_ece_of_a_calibrated_model_is_small():
    rng = np.random.default_rng(3)
    conf = rng.uniform(0.5, 1.0, 20000)
    correct = rng.random(20000) < conf
    probs = np.column_stack([conf, 1 - conf])
    labels = np.where(correct, 0, 1)
    assert cal.kde_ece(np.column_stack([probs, np.zeros(20000)]), labels) < 0.01


@pytest.mark.parametrize(("fmt", "signature"), [("png", b"\x89PNG"), ("svg", b"<?xml")])
def test_reliability_figure_draws_before_and_after(reference, fmt, signature):
    from calibration.plot import reliability_figure

    logits, labels = reference
    image = reliability_figure({"before": cal.softmax(logits), "after": cal.softmax(logits / 1.97)},
                               labels, format=fmt)
    assert image.startswith(signature) and len(image) > 5000
    if fmt == "svg":
        after = cal.ece(cal.softmax(logits / 1.97), labels)
        assert b"before (ECE 21.45%)" in image and f"after (ECE {100 * after:.2f}%)".encode() in image


def test_kde_ece_with_all_but_equal_confidences():
    # spread 5e-13: the default bandwidth is raised to MIN_BANDWIDTH; the two points then share
    # one kernel, whose accuracy is 1/2, so the error is |0.9 - 0.5|
    p = np.array([[0.9, 0.1, 0.0], [0.9 - 1e-12, 0.1 + 1e-12, 0.0]])
    assert cal.kde_ece(p, [0, 1]) == pytest.approx(0.4, abs=1e-9)
    with pytest.raises(ValueError, match=r"bandwidth must be a number >= 0\.0001"):
        cal.kde_ece(p, [0, 1], bandwidth=1e-9)


@pytest.mark.parametrize("probs", [[[0.2, 0.8], [0.7, 0.3], [0.4, 0.6]], [0.8, 0.3, 0.6],
                                   [[0.2, 0.7, 0.1], [0.6, 0.3, 0.1], [0.3, 0.3, 0.4]]])
def test_kde_ece_takes_nested_lists_as_arrays(probs):
    assert cal.kde_ece(probs, [1, 0, 0]) == cal.kde_ece(np.array(probs), np.array([1, 0, 0]))


@pytest.mark.parametrize(("k", "dtype", "entries"), [(2, np.float64, 64), (7, np.float32, 70), (300, np.float32, 1000)])
def test_validated_metrics_over_row_blocks_equal_the_public_metrics(k, dtype, entries):
    """The report's metrics from row blocks (float32 blocks read in float64, a block at a time) are
    the public metrics of the whole float64 matrix: bit for bit, but for classwise ECE's column totals."""
    rng = np.random.default_rng(k)
    labels = rng.integers(0, k, 1000)
    logits = rng.standard_normal((1000, k)) * 2
    logits[np.arange(1000), labels] += 1.5
    p = cal.softmax(logits).astype(dtype)
    p[0] = np.eye(k)[labels[0]]  # a confidence of exactly 1 (last bin)
    measured = cal.ValidatedMetrics(labels, k, n_bins=15)
    blocks = cal.row_blocks(1000, k, entries)
    assert len(blocks) > 1 and blocks[-1].stop == 1000
    for rows in blocks:
        measured.add(p[rows])
    values = measured.metrics()
    whole = p.astype(np.float64)
    for name in ("ece", "mce", "adaptive_ece", "kde_ece", "brier", "nll", "accuracy", "mean_confidence",
                 "expectation_consistency_gap"):
        metric = getattr(cal, name)
        assert values[name] == (metric(whole, labels, n_bins=15) if name in ("ece", "mce", "adaptive_ece")
                                else metric(whole, labels)), name
    assert values["classwise_ece"] == pytest.approx(cal.classwise_ece(whole, labels), rel=1e-14, abs=0)
    assert measured.reliability_diagram().to_dict() == cal.reliability_diagram(whole, labels).to_dict()


def test_validated_metrics_refuse_a_report_missing_rows():
    measured = cal.ValidatedMetrics(np.array([0, 1, 1]), 2)
    measured.add(np.array([[0.9, 0.1], [0.2, 0.8]]))
    with pytest.raises(ValueError, match="2 rows added for 3 labels"):
        measured.metrics()


def test_top_label_metrics_of_float32_probabilities_equal_those_of_their_float64_copy():
    """Float32 probabilities are validated and argmaxed in float32 (no float64 copy of the matrix);
    the n confidences are widened exactly, so every top-label metric is that of the float64 copy."""
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 50, 2000)
    p = cal.softmax(rng.standard_normal((2000, 50)) * 3).astype(np.float32)
    p[5, :] = 0
    p[5, 7] = 1  # exactly 1, and ties at 0
    wide = p.astype(np.float64)
    for metric in (cal.ece, cal.mce, cal.adaptive_ece, cal.kde_ece, cal.expectation_consistency_gap):
        assert metric(p, labels) == metric(wide, labels), metric.__name__
    assert cal.reliability_diagram(p, labels).to_dict() == cal.reliability_diagram(wide, labels).to_dict()
    bad = p.copy()
    bad[9, 0] = -0.25
    bad[9, 1] += 0.25
    with pytest.raises(ValueError, match="row 9"):
        cal.ece(bad, labels)
    bad[9, 1] += 0.5
    with pytest.raises(ValueError, match=r"row 9 sums to 1\.4"):
        cal.ece(bad, labels)


@pytest.mark.parametrize("norm", [1, 2])
def test_ece_of_kept_outcomes_is_the_ece_of_the_rows_to_the_bit(norm):
    """A caller that keeps each row's top-label outcome (e.g. a sliding window of served rows) gets
    exactly ``ece`` of the same rows, whether it took the outcomes in one batch or in pieces."""
    _, probs, labels = load_split("cifar100_densenet-bc-100", "val")  # real probabilities
    pieces = [cal.top_label_outcomes(probs[start:start + 700], labels[start:start + 700])
              for start in range(0, len(labels), 700)]
    confidence = np.concatenate([piece[0] for piece in pieces])
    correct = np.concatenate([piece[1] for piece in pieces])
    assert cal.ece_of_outcomes(confidence, correct, 15, norm) == cal.ece(probs, labels, 15, norm)
    assert cal.ece_of_outcomes(*cal.top_label_outcomes(probs, labels), 10) == cal.ece(probs, labels, 10)
    with pytest.raises(ValueError, match="one length"):
        cal.ece_of_outcomes(confidence, correct[:-1])
    with pytest.raises(ValueError):
        cal.ece_of_outcomes(confidence, correct, n_bins=0)
