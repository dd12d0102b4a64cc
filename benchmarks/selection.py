"""Method selection: the time of a 5-fold comparison of every default candidate on
cifar100_densenet-bc-100 (5000 x 100; goal under 10 s on this machine), its comparison table
(the Mix-n-Match pattern), and ``auto`` on every set of shared/data and on the synthetic traps
of ``tests/core/test_selection_guard.py`` (issue #23 item 2): its pick, the pick's test NLL,
the best default candidate's test NLL (known only in hindsight) and the uncalibrated test NLL,
with the pick the rule makes without its guards (``select(..., guards=False)``, the rule before
issue #23 item 2).

Every candidate is fitted on the validation split and scored on the test split; ``auto``'s pick
is refitted on the whole validation split exactly as ``auto`` does, so its test NLL is the
candidate's. Sets are loaded as ``tests.helpers.load_split`` does (``logits`` or ``probs``
with ``labels``, per shared/data/README.md).

Run: ``python benchmarks/selection.py`` (the project's own environment is enough; BLAS on one
thread unless ``OPENBLAS_NUM_THREADS`` is set).
"""

from __future__ import annotations

import os

# OpenBLAS's default threads made the 5000 x 100 comparison take 37-72 s instead of 3.0 s while
# other work shared this 2-core machine (vector scaling's small products); timings here are
# single-threaded unless the caller says otherwise
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import calibration as cal
from benchmarks._common import environment, write
from calibration.comparison import compare, default_candidates
from calibration.selection import select
from tests.core.test_selection_guard import separable_in_validation
from tests.helpers import DATASETS, load_split


def auto_row(name, kind, x, y, x_test, y_test):
    start = time.perf_counter()
    comparison = compare(x, y, input=kind, folds=5, seed=0)
    chosen = select(comparison)
    seconds = time.perf_counter() - start
    test_nll = {}
    for c in default_candidates(len(y), x.shape[1]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cal.ConvergenceWarning)
            test_nll[c.name] = cal.nll(c.create(kind).fit(x, y).predict_proba(x_test), y_test)
    pick = chosen.chosen.name
    best = min(test_nll, key=test_nll.get)
    raw = cal.nll(cal.validate_inputs(x_test, kind).probabilities, y_test)
    old = select(comparison, guards=False).chosen.name
    refused = ", ".join(n for n, why in chosen.excluded.items() if why.startswith("support guard")) or "-"
    return [name, pick, f"{test_nll[pick]:.4f}", f"{best} {test_nll[best]:.4f}",
            f"{test_nll[pick] / test_nll[best] - 1:+.2%}", f"{raw:.4f}", f"{test_nll[pick] / raw - 1:+.2%}",
            f"{old} {test_nll[old]:.4f}", refused, f"{seconds:.1f}"]


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
    chosen = select(comparison)
    auto_rows = []
    for name in DATASETS:
        kind, x, y = load_split(name, "val")
        _, x_test, y_test = load_split(name, "test")
        auto_rows.append(auto_row(name, kind, x, y, x_test, y_test))
        print(auto_rows[-1], flush=True)
    for seed in range(3):
        z, y, z_test, y_test = separable_in_validation(seed)
        auto_rows.append(auto_row(f"trap, seed {seed} (2000 x 10)", "logits", z, y, z_test, y_test))
        print(auto_rows[-1], flush=True)
    text = (
        f"5-fold comparison of the {len(comparison.results)} default candidates on 5000 x 100: "
        f"**{seconds:.2f} s**. Selection: {chosen.reason}\n\n"
        "## auto on every set (fit on val, NLL on test)\n\n"
        "The trap: class 0 separable in the validation split, 5% of its test rows like the others "
        "(tests/core/test_selection_guard.py). 'vs best' is the pick's test NLL over the best default "
        "candidate's; 'vs uncal.' over the uncalibrated test NLL; 'without guards' the pick of "
        "select(..., guards=False), the rule before the guards; 'refused' the candidates the support guard refused.\n\n"
        "| set | auto chose | its test NLL | best candidate | vs best | uncalibrated | vs uncal. "
        "| without guards | refused by the support guard | compare s |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
        + "\n".join("| " + " | ".join(r) + " |" for r in auto_rows)
    )
    write("selection", "Cross-validated comparison on cifar100_densenet-bc-100 (5 folds, seed 0; mean ± sd)",
          ["candidate", "NLL", "Brier", "ECE", "KDE-ECE", "gain ΔECE²", "fit s"], rows,
          environment(["numpy", "scipy"]), text)


if __name__ == "__main__":
    main()
