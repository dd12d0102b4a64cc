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

ROUNDS = 7


def main():
    rng = np.random.default_rng(0)
    n, k = 50000, 100
    probs = cal.softmax(3 * rng.standard_normal((n, k)))
    labels = rng.integers(0, k, n)
    ours = {
        "ece (15 bins)": lambda: cal.ece(probs, labels),
        "mce": lambda: cal.mce(probs, labels),
        "adaptive_ece": lambda: cal.adaptive_ece(probs, labels),
        "classwise_ece": lambda: cal.classwise_ece(probs, labels),
        "kde_ece": lambda: cal.kde_ece(probs, labels),
        "brier": lambda: cal.brier(probs, labels),
        "nll": lambda: cal.nll(probs, labels),
    }
    cases = {f"ours: {name}": fn for name, fn in ours.items()}
    cases.update(peers(probs, labels, k))
    # The machine's speed drifts between seconds: every round times the max pass and then each
    # case, and a case's ratio is taken within its round; the table gives the median over rounds.
    base, seconds = [], {name: [] for name in cases}
    ratios, one_thread = {name: [] for name in cases}, {name: [] for name in ours}
    for _ in range(ROUNDS):
        base.append(best_of(lambda: probs.max(axis=1), 10))
        for name, fn in cases.items():
            if callable(fn):
                seconds[name].append(best_of(fn, 5))
                ratios[name].append(seconds[name][-1] / base[-1])
        for name, fn in ours.items():
            with threadpool_limits(1):  # the row-sum check is a BLAS product, on 2 threads by default
                one_thread[name].append(best_of(fn, 5) / base[-1])
    base_ms = np.median(base) * 1e3
    rows = [["probs.max(axis=1)", "1.00x", "", f"{base_ms:.2f}", "", ""]]
    for name, fn in cases.items():
        if not callable(fn):
            rows.append([name, fn, "", "", "", ""])
            continue
        r = np.array(ratios[name])
        single = one_thread.get(name.removeprefix("ours: "))
        rows.append([name, f"{np.median(r):.2f}x", f"{r.min():.2f}-{r.max():.2f}",
                     f"{np.median(seconds[name]) * 1e3:.2f}", f"{np.median(single):.2f}x" if single else "",
                     f"{fn():.10f}"])
    env = environment(["numpy", "torch", "torchmetrics", "netcal"])
    write("metrics_speed", "Metrics on 50000 x 100 probabilities (float64)",
          ["metric", "time / probs.max(axis=1), median", f"range over {ROUNDS} rounds", "ms, median",
           "same, BLAS on 1 thread", "value"], rows, env,
          "Each round times `probs.max(axis=1)` and then every case (best of 5 calls); a ratio is taken "
          "within its round. Our binned metrics include input validation (row sums, range, finiteness); "
          "the row sums are a BLAS matrix-vector product, which uses every core unless limited (5th "
          "column: one thread). torchmetrics runs with one thread, as numpy's own loops do. The ratios "
          "depend on the CPU: the max pass is bound by per-row work, the metrics by memory traffic.")


def peers(probs, labels, k) -> dict:
    """torchmetrics' and netcal's top-label ECE and MCE; a string where a peer is not installed."""
    cases = {}
    try:
        import torch
        from torchmetrics.functional.classification import multiclass_calibration_error

        tp, tl = torch.from_numpy(probs), torch.from_numpy(labels)
        torch.set_num_threads(1)
        for norm in ("l1", "max"):
            cases[f"torchmetrics multiclass_calibration_error ({norm})"] = (
                lambda norm=norm: float(multiclass_calibration_error(tp, tl, num_classes=k, n_bins=15, norm=norm)))
    except ImportError:
        cases["torchmetrics"] = "not installed"
    try:
        from netcal.metrics import ECE, MCE

        cases["netcal ECE"] = lambda: float(ECE(bins=15).measure(probs, labels))
        cases["netcal MCE"] = lambda: float(MCE(bins=15).measure(probs, labels))
    except ImportError:
        cases["netcal"] = "not installed"
    return cases


if __name__ == "__main__":
    main()
