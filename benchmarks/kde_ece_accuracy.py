"""KDE-ECE against the 15-bin histogram ECE on the synthetic binary model of Mix-n-Match
(Zhang et al. 2020, Appendix E): P(Y=1) = P(Y=2) = 1/2, x | y ~ N(-1, 1) / N(+1, 1), model
z1 = 1 / (1 + exp(-b0 - b1 x)). The true (class-1) calibration error E|z1 - P(Y=1 | z1)| is
computed by quadrature and checked against a 10^6-sample Monte-Carlo estimate; each estimator's
mean absolute error to it is averaged over 1000 repetitions at n = 64, 256 and 1024.

The histogram estimator of the same quantity is the 15-bin binary (classwise) ECE; the 15-bin
top-label ECE is listed too, though for binary models it measures a smaller quantity (it merges
z1 = c with z1 = 1 - c, so errors of opposite sign cancel).

Run: ``python benchmarks/kde_ece_accuracy.py [repetitions]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import calibration as cal
from benchmarks._common import environment, write
from tests.helpers import synthetic_binary, true_binary_ece


def main():
    repetitions = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    rows = []
    for b0, b1 in [(0.5, -1.5), (0.2, -1.9)]:
        exact = true_binary_ece(b0, b1)
        rng = np.random.default_rng(0)
        probs, labels = synthetic_binary(rng, 10**6, b0, b1)
        monte_carlo = cal.classwise_ece(probs, labels, n_bins=200)
        for n in (64, 256, 1024):
            errors = {"kde": [], "binary": [], "top": []}
            for _ in range(repetitions):
                probs, labels = synthetic_binary(rng, n, b0, b1)
                errors["kde"].append(abs(cal.kde_ece(probs, labels) - exact))
                errors["binary"].append(abs(cal.classwise_ece(probs, labels) - exact))
                errors["top"].append(abs(cal.ece(probs, labels) - exact))
            kde, binary, top = (float(np.mean(errors[key])) for key in ("kde", "binary", "top"))
            rows.append([f"({b0}, {b1})", f"{exact:.5f} (MC {monte_carlo:.5f})", n, f"{kde:.5f}", f"{binary:.5f}",
                         f"{top:.5f}", "yes" if kde < binary else "NO"])
    write("kde_ece_accuracy", f"KDE-ECE vs binned ECE, mean absolute error over {repetitions} repetitions",
          ["(b0, b1)", "true ECE", "n", "KDE-ECE", "15-bin binary ECE", "15-bin top-label ECE",
           "KDE better"], rows, environment(["numpy", "scipy"]))


if __name__ == "__main__":
    main()
