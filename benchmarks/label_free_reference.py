"""The label-free drift alarm against an estimated reference (``calibration.label_free``), on the
real model outputs of ../shared/data: its false-alarm rate for references of 100, 300, 1000 and
5000 rows, against the same e-process taken at the reference's plain means (the service's monitor
before the reference was accounted for), its power under a prior shift, and the reference rows
``rows_needed`` says a drift of the expected confidence needs. A companion of
``benchmarks/drift_alarms.py`` (whose ``Served`` and samplers it uses).

Each stream has its own reference: ``n_ref`` rows drawn (with replacement) from the test split
through the temperature scaling fitted on the validation split, as the service's reference is its
labelled observations. The stream draws its rows from the same split (no shift: the null holds
exactly, the population being the split) or with tweak-one priors (one random class gets 0.9).
The e-process: alpha 0.01, tolerances 0.02, half-life 1000, ``horizon`` rows per stream;
``streams`` streams per cell without shift, a quarter as many with it.
Intervals: Clopper-Pearson 95%.

Run: ``flock /tmp/cpu.lock python benchmarks/label_free_reference.py [streams] [horizon]``
(default 400, 10000); results in benchmarks/results/label_free_reference.md.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import environment, write
from benchmarks.drift_alarms import Served, clopper_pearson
from calibration.label_free import label_free_test, rows_needed
from calibration.monitoring import DriftTest

DATASETS = ["cifar10_resnet50_cross_entropy", "cifar10_lenet5", "cifar100_densenet-bc-100"]
REFERENCES = [100, 300, 1000, 5000]
ALPHA, TOLERANCE, HALF_LIFE, BLOCK = 0.01, 0.02, 1000.0, 1000
DRIFTS = [0.05, 0.1, 0.2]


def tests_for(served: Served, rng, streams: int, n_ref: int) -> tuple[DriftTest, DriftTest, np.ndarray, np.ndarray]:
    """The accounted test (per-stream widened tolerances, as ``label_free_test`` builds one per
    reference), the plain one, and each stream's reference confidence and class means."""
    references = rng.integers(0, len(served.labels), (streams, n_ref))
    confidence, means, widened, class_widened = [], [], [], []
    for rows in references:
        test, reference = label_free_test(served.probs[rows], alpha=ALPHA, tolerance=TOLERANCE,
                                          class_tolerance=TOLERANCE, half_life=HALF_LIFE)
        confidence.append(reference.confidence)
        means.append(reference.mean)
        widened.append(test.tolerance)
        class_widened.append(test.class_tolerance)
    accounted = DriftTest(alpha=test.alpha, tolerance=0.0, half_life=HALF_LIFE, shape=(streams,),
                          n_classes=served.k, class_tolerance=0.0)
    accounted.tolerance = np.asarray(widened)[:, None]  # one game per stream, each with its own reference
    accounted.class_tolerance = np.asarray(class_widened)[:, None, :]
    plain = DriftTest(alpha=ALPHA, tolerance=TOLERANCE, half_life=HALF_LIFE, shape=(streams,), n_classes=served.k,
                      class_tolerance=TOLERANCE)
    return accounted, plain, np.asarray(confidence), np.asarray(means)


def run(served: Served, rng, streams: int, horizon: int, n_ref: int, priors: np.ndarray | None) -> tuple:
    accounted, plain, confidence, means = tests_for(served, rng, streams, n_ref)
    step = max(1, min(BLOCK, 300_000 // (streams * served.k)))
    for _ in range(0, horizon, BLOCK):
        rows = (rng.integers(0, len(served.labels), (streams, BLOCK)) if priors is None
                else served.rows_with_priors(rng, priors, BLOCK))
        for at in range(0, BLOCK, step):
            part = rows[:, at:at + step]
            top, probs = served.confidence[part], served.probs[part]
            accounted.update(top - confidence[:, None], probs - means[:, None, :])
            plain.update(top - confidence[:, None], probs - means[:, None, :])
    return accounted.alarm_at, plain.alarm_at


def rate(alarm_at: np.ndarray) -> str:
    k, n = int((alarm_at >= 0).sum()), len(alarm_at)
    low, high = clopper_pearson(k, n)
    return f"{k / n:.4f} [{low:.4f}, {high:.4f}]"


def main():
    streams = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    horizon = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    rng = np.random.default_rng(21)
    null_rows, shift_rows, need_rows = [], [], []
    started = time.perf_counter()
    for name in DATASETS:
        served = Served(name)
        shifted = max(streams // 4, 1)
        priors = np.full((shifted, served.k), 0.1 / (served.k - 1))
        priors[np.arange(shifted), rng.integers(0, served.k, shifted)] = 0.9
        for n_ref in REFERENCES:
            accounted, plain = run(served, rng, streams, horizon, n_ref, None)
            null_rows.append([name, served.k, n_ref, rate(accounted), rate(plain)])
            print(null_rows[-1], flush=True)
            accounted, plain = run(served, rng, len(priors), horizon, n_ref, priors)
            hit = accounted[accounted >= 0]
            shift_rows.append([name, n_ref, rate(accounted), f"{int(np.median(hit))}" if len(hit) else "-"])
            print(shift_rows[-1], flush=True)
        sd = float(served.confidence.std())
        need_rows.append([name, f"{sd:.3f}"] + [str(rows_needed(d, TOLERANCE, ALPHA, sd=sd)) for d in DRIFTS])
    notes = (f"Command: `flock /tmp/cpu.lock python benchmarks/label_free_reference.py {streams} {horizon}` "
             f"({time.perf_counter() - started:.0f} s). {streams} streams of {horizon} rows per cell, each with its "
             "own reference. Accounted: the reference's bounds spend alpha/2, the e-process the other half with "
             "tolerances widened by them (`calibration.label_free`, the service's label-free monitor). Plain: the "
             "e-process at alpha against the reference's sample means, tolerances 0.02.")
    text = write("label_free_reference", "Label-free alarm: false alarms for any reference size",
                 ["data set", "k", "reference rows", f"false-alarm rate, accounted (alpha {ALPHA})",
                  "false-alarm rate, plain means"], null_rows, environment(["numpy", "scipy"]), notes)
    extra = ["", f"## Tweak-one prior shift (one class at 0.9) from the first row, {max(streams // 4, 1)} streams", "",
             "| data set | reference rows | detected within the horizon | median delay (rows) |", "|---|---|---|---|"]
    extra += ["| " + " | ".join(str(c) for c in row) + " |" for row in shift_rows]
    extra += ["", "## Reference rows needed to see a drift d of the expected confidence (`rows_needed`, "
              "tolerance 0.02, alpha 0.01, sd = the split's confidence spread)", "",
              "| data set | sd | " + " | ".join(f"d = {d}" for d in DRIFTS) + " |", "|---|---|" + "---|" * len(DRIFTS)]
    extra += ["| " + " | ".join(row) + " |" for row in need_rows]
    (Path(__file__).parent / "results" / "label_free_reference.md").write_text(text + "\n".join(extra) + "\n")
    print("\n".join(extra))


if __name__ == "__main__":
    main()
