"""Calibration reports: the core's metrics before and after calibration, reliability bins and,
on request, bootstrap intervals. Every number comes from a function of ``calibration``."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

import calibration as cal

METRICS: dict[str, Callable[..., float]] = {
    "ece": cal.ece,
    "mce": cal.mce,
    "adaptive_ece": cal.adaptive_ece,
    "classwise_ece": cal.classwise_ece,
    "kde_ece": cal.kde_ece,
    "brier": cal.brier,
    "nll": cal.nll,
    "accuracy": cal.accuracy,
    "mean_confidence": cal.mean_confidence,
    "expectation_consistency_gap": cal.expectation_consistency_gap,
}
BINNED = {"ece", "mce", "adaptive_ece", "classwise_ece"}


def finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def metric_values(probs: np.ndarray, labels: np.ndarray, n_bins: int) -> dict[str, float | None]:
    """Every metric of ``METRICS``; an infinite NLL (a label given probability 0) is null."""
    return {
        name: finite_or_none(fn(probs, labels, n_bins=n_bins) if name in BINNED else fn(probs, labels))
        for name, fn in METRICS.items()
    }


def intervals(probs: np.ndarray, labels: np.ndarray, n_bins: int, n_resamples: int,
              confidence: float, seed: int) -> dict[str, dict]:
    out = {}
    for name, fn in METRICS.items():
        kwargs = {"n_bins": n_bins} if name in BINNED else {}
        interval = cal.bootstrap_interval(fn, probs, labels, n_resamples=n_resamples,
                                          confidence=confidence, seed=seed, **kwargs)
        out[name] = {k: finite_or_none(v) if isinstance(v, float) else v
                     for k, v in interval.to_dict().items()}
    return out


def evaluation(probs: np.ndarray, labels: np.ndarray, n_bins: int = 15, bootstrap: int = 0,
               confidence: float = 0.95, seed: int = 0) -> dict:
    """Metrics, reliability bins and optional intervals of one set of probabilities that the
    service has validated (a validated batch's, or a calibrator's output) and their validated
    labels. A numpy ``(n, k)`` matrix is measured once, in row blocks (``measured``), not
    re-validated by each metric; another array library's goes through the public metrics."""
    if isinstance(probs, np.ndarray) and probs.ndim == 2:
        out = _validated_evaluation(measured(probs, labels, n_bins))
    else:
        out = {
            "metrics": metric_values(probs, labels, n_bins),
            "reliability_diagram": cal.reliability_diagram(probs, labels, n_bins=n_bins).to_dict(),
        }
    if bootstrap:
        out["intervals"] = intervals(probs, labels, n_bins, bootstrap, confidence, seed)
    return out


def comparison(raw: np.ndarray, calibrated: np.ndarray, labels: np.ndarray, n_bins: int = 15,
               bootstrap: int = 0, confidence: float = 0.95, seed: int = 0) -> dict:
    """Before and after calibration on one labelled set, and the calibration gain."""
    report = {
        "n_samples": int(labels.shape[0]),
        "n_classes": int(raw.shape[1]),
        "n_bins": n_bins,
        "before": evaluation(raw, labels, n_bins, bootstrap, confidence, seed),
        "after": evaluation(calibrated, labels, n_bins, bootstrap, confidence, seed),
        "calibration_gain": finite_or_none(cal.calibration_gain(raw, calibrated, labels)),
    }
    if bootstrap:
        gain = cal.bootstrap_interval(cal.calibration_gain, raw, calibrated, labels,
                                      n_resamples=bootstrap, confidence=confidence, seed=seed)
        report["calibration_gain_interval"] = gain.to_dict()
    return report


def fresh_probabilities(inputs: cal.InputBatch) -> np.ndarray:
    """The inputs' probabilities, not kept on ``inputs`` when they are computed from logits (the
    same values as ``inputs.probabilities``: ``calibration.softmax`` of the logits)."""
    if inputs.source == "logits" and "probabilities" not in vars(inputs):
        return cal.softmax(inputs.logits)
    return inputs.probabilities


def measured(probs: np.ndarray, labels: np.ndarray, n_bins: int) -> cal.ValidatedMetrics:
    """``calibration.ValidatedMetrics`` of a validated numpy ``(n, k)`` matrix, fed in row blocks."""
    result = cal.ValidatedMetrics(np.asarray(labels), probs.shape[1], n_bins)
    for rows in cal.row_blocks(*probs.shape):
        result.add(probs[rows])
    return result


def _validated_evaluation(measured: cal.ValidatedMetrics) -> dict:
    metrics = {name: finite_or_none(value) for name, value in measured.metrics().items()}
    return {"metrics": metrics, "reliability_diagram": measured.reliability_diagram().to_dict()}


def fit_report(inputs: cal.InputBatch, predict, labels: np.ndarray, n_bins: int = 15) -> dict:
    """A fit's validation report: ``comparison`` of the inputs' probabilities and ``predict(inputs)``
    on the fitting data (validated once, by the fit). Numpy inputs are measured in row blocks
    (``calibration.ValidatedMetrics``: the same values as ``evaluation``'s metrics, computed from one
    pass over each block's probabilities before and after calibration), so neither probability
    matrix is held whole. The gain is the difference of the two Brier scores, as
    ``calibration.calibration_gain`` computes it."""
    if inputs.xp is not np:
        return _whole_report(inputs, predict, labels, n_bins)
    before, after = cal.ValidatedMetrics(labels, inputs.k, n_bins), cal.ValidatedMetrics(labels, inputs.k, n_bins)
    given = inputs.given  # as validated: float32 rows are widened a block at a time
    for rows in cal.row_blocks(inputs.n, inputs.k):
        block = cal.InputBatch(**{inputs.source: given[rows]})
        before.add(fresh_probabilities(block))
        after.add(predict(block))
    return _report_of(_validated_evaluation(before), _validated_evaluation(after), labels, inputs.k, n_bins)


def _whole_report(inputs: cal.InputBatch, predict, labels: np.ndarray, n_bins: int) -> dict:
    """``fit_report`` on another array library's device: the public metrics, one probability
    matrix at a time (each is dropped once measured)."""
    probabilities = fresh_probabilities(inputs)
    before = evaluation(probabilities, labels, n_bins)
    del probabilities
    return _report_of(before, evaluation(predict(inputs), labels, n_bins), labels, inputs.k, n_bins)


def _report_of(before: dict, after: dict, labels: np.ndarray, n_classes: int, n_bins: int) -> dict:
    gain = before["metrics"]["brier"] - after["metrics"]["brier"]
    return {"n_samples": int(labels.shape[0]), "n_classes": n_classes, "n_bins": n_bins,
            "class_counts": np.bincount(labels, minlength=n_classes).tolist(),  # the priors of app.registry.prior_shift
            "before": before, "after": after, "calibration_gain": finite_or_none(gain)}
