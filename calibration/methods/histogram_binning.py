"""Histogram binning (Zadrozny & Elkan, "Obtaining calibrated probability estimates from
decision trees and naive Bayesian classifiers", ICML 2001), one-vs-all.

For each class j, ``p_j`` is binned and replaced by the fraction of rows in its bin whose
label is j; rows are then renormalised (a row of zeros becomes uniform). Bins follow the
metrics' convention ``(lo, hi]`` with 0 in the first bin: ``strategy="uniform"`` uses
``n_bins`` equal-width bins, ``"quantile"`` edges at the quantiles of ``p_j`` on the
validation set (equal-count, as Zadrozny & Elkan). An empty bin keeps the identity: its value
is its midpoint. Not accuracy-preserving.

Backends: the bins are fitted on a float64 host copy; prediction (``searchsorted`` and a
lookup) runs on the input's device.
"""

from __future__ import annotations

import numpy as np

from ..backend import column, namespace
from ..base import Calibrator, FitDiagnostics, normalise_rows, on_device, param_array
from ..inputs import InputBatch
from ..options import INPUT_OPTION, Option


def _bin(values, edges):
    xp = namespace(values)
    return xp.clip(xp.searchsorted(edges, values, side="left") - 1, min=0, max=edges.shape[0] - 2)


class HistogramBinning(Calibrator):
    """Histogram binning per class, renormalised; see the module docstring."""

    method = "histogram_binning"
    description = (
        "Histogram binning (Zadrozny & Elkan 2001), one-vs-all: each class probability is "
        "replaced by the positive rate of its bin, renormalised."
    )
    options_spec = (
        INPUT_OPTION,
        Option("n_bins", int, 15, "Number of bins per class.", minimum=1, maximum=10_000),
        Option("strategy", str, "uniform", "Equal-width or equal-count (quantile) bins.",
               choices=("uniform", "quantile")),
    )

    def _fit(self, scores: InputBatch, labels: np.ndarray) -> FitDiagnostics:
        p = scores.probabilities
        n_bins = self.options["n_bins"]
        edges = np.empty((scores.k, n_bins + 1))
        values = np.empty((scores.k, n_bins))
        for j in range(scores.k):
            if self.options["strategy"] == "uniform":
                edges[j] = np.linspace(0.0, 1.0, n_bins + 1)
            else:
                edges[j] = np.quantile(p[:, j], np.linspace(0.0, 1.0, n_bins + 1))
                edges[j, 0], edges[j, -1] = 0.0, 1.0
                edges[j] = np.maximum.accumulate(edges[j])
            index = _bin(p[:, j], edges[j])
            counts = np.bincount(index, minlength=n_bins)
            hits = np.bincount(index, weights=(labels == j).astype(np.float64), minlength=n_bins)
            midpoints = (edges[j, :-1] + edges[j, 1:]) / 2
            values[j] = np.where(counts > 0, hits / np.maximum(counts, 1), midpoints)
        self.edges_, self.values_ = edges, values
        return FitDiagnostics(True, 1, "exact (bin frequencies)")

    def _predict(self, scores: InputBatch) -> np.ndarray:
        p, xp = scores.probabilities, scores.xp
        edges, values = on_device(self.edges_, scores), on_device(self.values_, scores)
        mapped = xp.stack([xp.take(values[j, :], _bin(column(p, j), edges[j, :])) for j in range(scores.k)], axis=1)
        return normalise_rows(mapped)

    def _params(self) -> dict:
        return {"edges": self.edges_.tolist(), "values": self.values_.tolist()}

    def _set_params(self, params: dict) -> None:
        k, n_bins = self.n_classes_, self.options["n_bins"]
        self.edges_ = param_array(params, "edges", (k, n_bins + 1))
        self.values_ = param_array(params, "values", (k, n_bins))
        if np.any(np.diff(self.edges_, axis=1) < 0) or np.any((self.values_ < 0) | (self.values_ > 1)):
            raise ValueError("stored histogram bins must have sorted edges and values in [0, 1]")

    def summary(self) -> dict:
        return {"n_bins": self.options["n_bins"], "strategy": self.options["strategy"]}
