"""The drift monitor's power on real model outputs (issue #35): what ``POST
/v1/calibrators/{name}/power`` answers (``calibration.power``, the code its job runs) for a
temperature scaling fitted on the validation split of four sets in ../shared/data, with that split as
the calibrator's stored labelled rows (the rows it was fitted on).

Shifts: the logits times 1.25 and 1.5 (``temperature``), one class at prior 0.5 with the others in
their proportions (``tweak_one``, a random class per stream), and the labels of one random class
pair exchanged (``swap``); the labelled monitor for all, the label-free one (reference: a random
half of the rows) for the first two. Monitor options as the service's defaults (alpha 0.01,
tolerances 0.02, half-life 1000). Each cell: ``streams`` streams of up to ``labels`` rows; the
detection probability within N with its Clopper-Pearson 95% interval, the median labels to the
alarm with its order-statistic 95% interval, and the null run's false-alarm rate (same
simulation, no shift). ``drift``: the shift's expected ``mean confidence - accuracy`` (labelled)
or confidence drift against the reference (label-free); ``visible``: the share of streams whose
expected drift exceeds a tolerance of the monitor (else it can never alarm more than the null).

Run: ``flock /tmp/cpu.lock python benchmarks/power_analysis.py [streams] [labels] [labels_k100]``
(default 200, 50000, 20000: CIFAR-100 streams are cut to ``labels_k100`` rows and half the streams,
as each of their rows carries 101 residuals); results in benchmarks/results/power_analysis.md.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import calibration as cal
from benchmarks._common import environment, write
from calibration.power import Shift, power
from tests.helpers import load_split

DATASETS = ["cifar10_resnet50_cross_entropy", "cifar10_resnet50_focal_loss", "cifar10_lenet5",
            "cifar100_densenet-bc-100"]
CELLS = [(Shift("temperature", 1.25), "labelled"), (Shift("temperature", 1.5), "labelled"),
         (Shift("tweak_one", 0.5), "labelled"), (Shift("swap", 1), "labelled"),
         (Shift("temperature", 1.5), "label_free"), (Shift("tweak_one", 0.5), "label_free")]


def fitted(name: str):
    kind, val, labels = load_split(name, "val")
    logits = val.astype(np.float64) if kind == "logits" else np.log(np.clip(val, 1e-12, 1.0))
    calibrator = cal.create("temperature", {"input": "logits"}).fit(logits, labels)
    return logits, labels, calibrator.predict_proba


def rate(entry: dict) -> str:
    return f"{entry['rate']:.3f} [{entry['low']:.3f}, {entry['high']:.3f}]"


def delay(entry: dict, labels: int) -> str:
    def value(x) -> str:
        return f">{labels}" if x is None else str(x)
    return f"{value(entry['estimate'])} [{value(entry['low'])}, {value(entry['high'])}]"


def main() -> None:
    streams = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    labels = int(sys.argv[2]) if len(sys.argv) > 2 else 50_000
    labels_k100 = int(sys.argv[3]) if len(sys.argv) > 3 else 20_000
    rows, started = [], time.perf_counter()
    for name in DATASETS:
        logits, y, calibrate = fitted(name)
        k = logits.shape[1]
        n_streams, n_labels = (streams, labels) if k <= 10 else (max(streams // 2, 1), labels_k100)
        checkpoint = min(5000, n_labels)
        for shift, signal in CELLS:
            begun = time.perf_counter()
            result = power(calibrate, logits, "logits", y, shift, streams=n_streams, max_labels=n_labels,
                           signal=signal, checkpoints=[checkpoint], seed=35)
            shifted, null = result["shifted"], result["null"]
            early = next(w for w in shifted["within"] if w["labels"] == checkpoint)
            rows.append([name, k, signal, f"{shift.kind} {shift.size:g}", f"{n_streams} x {n_labels}",
                         f"{shifted['drift']['confidence_gap_median']:.4f}",
                         f"{shifted['drift']['visible_share']:.2f}", rate(early), rate(shifted["detected"]),
                         delay(shifted["delay"][1], n_labels), rate(null["detected"]),
                         f"{time.perf_counter() - begun:.0f}"])
            print(rows[-1], flush=True)
    notes = (f"Command: `flock /tmp/cpu.lock python benchmarks/power_analysis.py {streams} {labels} {labels_k100}` "
             f"({time.perf_counter() - started:.0f} s in all, seed 35). Temperature scaling fitted on each set's "
             "validation split, which is also the population the streams draw from (with replacement). "
             "Detected within N: alarms / streams, Clopper-Pearson 95%. Median labels to alarm: the order "
             "statistic with its distribution-free 95% interval ('>N': not reached within the streams' N rows). "
             "Null: the same simulation without the shift. No MNIST set is in ../shared/data, so none is here.")
    write("power_analysis", "Drift monitor power on real outputs (calibration.power, the `power` job)",
          ["data set", "k", "monitor", "shift", "streams x N", "drift of conf - acc (abs)", "visible",
           "detected within 5000 (CIFAR-100: N)", "detected within N", "median labels to alarm",
           "null false alarms within N", "s"], rows, environment(["numpy", "scipy"]), notes)


if __name__ == "__main__":
    main()
