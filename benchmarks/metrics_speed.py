"""Binned metrics on 50000 x 100 probabilities, as multiples of one ``probs.max(axis=1)`` pass,
side by side with torchmetrics and netcal (each on the same float64 array, or the float32 /
tensor form it needs, conversion excluded).

Run: ``python benchmarks/metrics_speed.py`` (in the environment of benchmarks/README.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import calibration as cal
from benchmarks._common import best_of, environment, write


def main():
    rng = np.random.default_rng(0)
    n, k = 50000, 100
    probs = cal.softmax(3 * rng.standard_normal((n, k)))
    labels = rng.integers(0, k, n)
    base = best_of(lambda: probs.max(axis=1), 20)
    rows = [["probs.max(axis=1)", "1.00x", f"{base * 1e3:.2f}", "", ""]]
    ours = {
        "ece (15 bins)": lambda: cal.ece(probs, labels),
        "mce": lambda: cal.mce(probs, labels),
        "adaptive_ece": lambda: cal.adaptive_ece(probs, labels),
        "classwise_ece": lambda: cal.classwise_ece(probs, labels),
        "kde_ece": lambda: cal.kde_ece(probs, labels),
        "brier": lambda: cal.brier(probs, labels),
        "nll": lambda: cal.nll(probs, labels),
    }
    for name, fn in ours.items():
        seconds = best_of(fn, 10)
        with threadpool_limits(1):  # the row-sum check is a BLAS product, on 2 threads by default
            one_thread = best_of(fn, 10)
        rows.append([f"ours: {name}", f"{seconds / base:.2f}x", f"{seconds * 1e3:.2f}", f"{one_thread / base:.2f}x",
                     f"{fn():.10f}"])
    try:
        import torch
        from torchmetrics.functional.classification import multiclass_calibration_error

        tp, tl = torch.from_numpy(probs), torch.from_numpy(labels)
        torch.set_num_threads(1)

        def torchmetrics_ece():
            return float(multiclass_calibration_error(tp, tl, num_classes=k, n_bins=15, norm="l1"))

        seconds = best_of(torchmetrics_ece, 10)
        rows.append(["torchmetrics multiclass_calibration_error (l1)", f"{seconds / base:.2f}x",
                     f"{seconds * 1e3:.2f}", "", f"{torchmetrics_ece():.10f}"])
        def torchmetrics_max():
            return float(multiclass_calibration_error(tp, tl, num_classes=k, n_bins=15, norm="max"))

        seconds = best_of(torchmetrics_max, 10)
        rows.append(["torchmetrics multiclass_calibration_error (max)", f"{seconds / base:.2f}x",
                     f"{seconds * 1e3:.2f}", "", f"{torchmetrics_max():.10f}"])
    except ImportError:
        rows.append(["torchmetrics", "not installed", "", "", ""])
    try:
        from netcal.metrics import ECE, MCE

        def netcal_ece():
            return float(ECE(bins=15).measure(probs, labels))

        def netcal_mce():
            return float(MCE(bins=15).measure(probs, labels))

        for name, fn in (("netcal ECE", netcal_ece), ("netcal MCE", netcal_mce)):
            seconds = best_of(fn, 5)
            rows.append([name, f"{seconds / base:.2f}x", f"{seconds * 1e3:.2f}", "", f"{fn():.10f}"])
    except ImportError:
        rows.append(["netcal", "not installed", "", "", ""])
    env = environment(["numpy", "torch", "torchmetrics", "netcal"])
    write("metrics_speed", "Metrics on 50000 x 100 probabilities (float64)",
          ["metric", "time / probs.max(axis=1)", "ms", "same, BLAS on 1 thread", "value"], rows, env,
          "Our binned metrics include input validation (row sums, range, finiteness); the row sums are "
          "a BLAS matrix-vector product, which uses every core unless limited (4th column: one thread). "
          "torchmetrics runs with one thread, as numpy's own loops do.")


if __name__ == "__main__":
    main()
