"""Method selection: the time of a 5-fold comparison of every default candidate on
cifar100_densenet-bc-100 (5000 x 100; goal under 10 s on this machine), its comparison table
(the Mix-n-Match pattern), and ``auto`` on every set of shared/data against the best default
candidate's test NLL, known only in hindsight.

Run: ``python benchmarks/selection.py`` (the project's own environment is enough).
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import calibration as cal
from benchmarks._common import environment, write
from calibration.comparison import compare, default_candidates
from calibration.selection import select
from tests.helpers import DATASETS, load_split


def main():
    kind, x, y = load_split("cifar100_densenet-bc-100", "val")
    start = time.perf_counter()
    comparison = compare(x, y, input=kind, folds=5, seed=0)
    seconds = time.perf_counter() - start
    rows = []
    for result in comparison.results:
        row = [result.candidate.name]
        for metric in ("nll", "brier", "ece", "kde_ece", "calibration_gain", "fit_seconds"):
            row.append(f"{result.mean(metric):.5f} ± {result.std(metric):.5f}")
        rows.append(row)
    uncalibrated = ["uncalibrated"] + [
        f"{sum(comparison.uncalibrated[m]) / comparison.folds:.5f}"
        for m in ("nll", "brier", "ece", "kde_ece", "calibration_gain", "fit_seconds")]
    rows.insert(0, uncalibrated)
    selection = select(comparison)
    auto_rows = []
    for name in DATASETS:
        kind, x, y = load_split(name, "val")
        _, x_test, y_test = load_split(name, "test")
        start = time.perf_counter()
        auto = cal.create("auto", {"input": kind}).fit(x, y)
        fit_seconds = time.perf_counter() - start
        test_nll = {}
        for c in default_candidates(len(y), x.shape[1]):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", cal.ConvergenceWarning)
                test_nll[c.name] = cal.nll(c.create(kind).fit(x, y).predict_proba(x_test), y_test)
        chosen = auto.summary()["chosen"]
        best = min(test_nll, key=test_nll.get)
        raw = cal.nll(cal.validate_inputs(x_test, kind).probabilities, y_test)
        auto_rows.append([name, chosen, f"{test_nll[chosen]:.4f}", f"{best} {test_nll[best]:.4f}",
                          f"{test_nll[chosen] / test_nll[best] - 1:+.2%}", f"{raw:.4f}", f"{fit_seconds:.1f}"])
    text = (
        f"5-fold comparison of the {len(comparison.results)} default candidates on 5000 x 100: "
        f"**{seconds:.2f} s**. Selection: {selection.reason}\n\n"
        "## auto on every set (fit on val, NLL on test)\n\n"
        "| set | auto chose | its test NLL | best default candidate | gap | uncalibrated | auto fit s |\n"
        "|---|---|---|---|---|---|---|\n"
        + "\n".join("| " + " | ".join(r) + " |" for r in auto_rows)
    )
    write("selection", "Cross-validated comparison on cifar100_densenet-bc-100 (5 folds, seed 0; mean ± sd)",
          ["candidate", "NLL", "Brier", "ECE", "KDE-ECE", "gain ΔECE²", "fit s"], rows,
          environment(["numpy", "scipy"]), text)


if __name__ == "__main__":
    main()
