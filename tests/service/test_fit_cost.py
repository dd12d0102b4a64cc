"""What a fit costs besides the fit (#23 item 9, #19): its validation report measures the validated
arrays once, in row blocks, with the public metrics' values; a job keeps a float32 input as float32."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import calibration as cal
from app import job_store, reports
from app.batches import ArrayBatch, validated
from app.job_inputs import batch_of_job, job_input
from app.schemas import FitFields


def logits_and_labels(n: int, k: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.standard_normal((n, k), dtype=np.float32) * 2
    logits[np.arange(n), labels] += 2.5
    return logits, labels


def public_evaluation(probabilities: np.ndarray, labels: np.ndarray) -> dict:
    return reports.evaluation(probabilities, labels, 15)


@pytest.mark.parametrize(("kind", "method"), [("logits", "temperature"), ("probabilities", "isotonic_multiclass")])
def test_the_fit_report_is_the_public_metrics_of_both_matrices(kind, method):
    logits, labels = logits_and_labels(3000, 1200)  # 3.6 M entries: two row blocks
    values = logits if kind == "logits" else cal.softmax(logits.astype(np.float64))
    inputs = cal.validate_inputs(values, kind)
    calibrator = cal.create(method, {"input": kind}).fit_batch(inputs, labels, warn=False)
    assert len(cal.row_blocks(inputs.n, inputs.k)) == 2
    report = reports.fit_report(inputs, calibrator.predict_batch, labels)
    before = public_evaluation(inputs.probabilities, labels)
    after = public_evaluation(calibrator.predict_batch(inputs), labels)
    for side, expected in (("before", before), ("after", after)):
        assert report[side]["reliability_diagram"] == expected["reliability_diagram"]
        for name, value in expected["metrics"].items():
            if name == "classwise_ece":  # column totals added block by block
                assert report[side]["metrics"][name] == pytest.approx(value, rel=1e-14, abs=0)
            else:
                assert report[side]["metrics"][name] == value, (side, name)
    assert report["calibration_gain"] == before["metrics"]["brier"] - after["metrics"]["brier"]
    assert report["class_counts"] == np.bincount(labels, minlength=1200).tolist()


def test_the_fit_report_holds_no_probability_matrix():
    """50000 x 400 float32 logits (76 MiB; their probabilities are 153 MiB in float64): the report
    allocates at most 0.4x the float32 array at its peak (it was 2.25x with whole matrices)."""
    logits, labels = logits_and_labels(50000, 400)
    inputs = cal.validate_inputs(logits, "logits")
    calibrator = cal.create("temperature").fit_batch(inputs, labels, warn=False)
    tracemalloc.start()
    try:
        report = reports.fit_report(inputs, calibrator.predict_batch, labels)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert report["n_samples"] == 50000
    assert peak < 0.4 * logits.nbytes, peak / logits.nbytes


def test_a_job_keeps_a_float32_input_and_fits_the_same_values():
    logits, labels = logits_and_labels(500, 10)
    batch = ArrayBatch(FitFields(method="temperature"), "logits", logits, labels)
    request, payload = job_input(batch, labels)
    assert job_store.unpack_arrays(payload)["values"].dtype == np.float32
    assert len(payload) < logits.nbytes + labels.nbytes + 1024  # not the float64 copy's 40 kB
    again, _ = validated(batch_of_job(request, payload, FitFields))
    given, _ = validated(batch)
    assert np.array_equal(again.logits, given.logits) and again.logits.dtype == np.float64
