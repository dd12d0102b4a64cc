"""Every metric of a validation report from one set of already-validated arrays, in row blocks.

For a caller that has validated its inputs once (``validate_inputs``, ``check_labels``) and holds
probabilities it trusts (those inputs', and a fitted calibrator's outputs): the service's fit
report. Nothing is checked again. The probabilities arrive in row blocks of numpy arrays (float32
or float64); each block is read once in float64 (one block at a time) and reduced to per-row
n-vectors (top-label confidence, correctness, the label's probability, the squared norm) and to
the entries above the first bin edge for classwise ECE, so no n×k float64 matrix is held.

The metrics are those of ``binned``, ``kde`` and ``scores``, with the formulas and references of
their docstrings (ECE, MCE and adaptive ECE: Guo et al. 2017, Nixon et al. 2019; classwise ECE:
Kull et al. 2019; KDE-ECE: Zhang et al. 2020; Brier summed over classes; NLL natural log, the
label's probability floored at ``probability_floor.EPSILON``). They are
computed from the same per-row values in the same order as on the whole matrix, so they are
identical to ``ece(p, y)``, ``brier(p, y)``, ...; only classwise ECE's column totals are added
block by block (a difference of rounding, about 1e-16 relative).
"""

from __future__ import annotations

import numpy as np

from ..probability_floor import EPSILON
from ._inputs import BLOCK_ENTRIES as BLOCK_ENTRIES  # their home is _inputs; imported from here too
from ._inputs import row_blocks as row_blocks
from .binned import _binned_error, adaptive_error, diagram_of, equal_width_bin, maximum_error
from .kde import kde_error


class ValidatedMetrics:
    """The report's metrics of ``n`` rows of ``k`` validated probabilities, fed by ``add`` in
    order, block by block; ``labels`` are the validated int64 labels of all ``n`` rows."""

    def __init__(self, labels: np.ndarray, k: int, n_bins: int = 15, classwise: bool = True):
        n = labels.shape[0]
        self.labels, self.k, self.n_bins, self.at = labels, k, n_bins, 0
        self.confidence, self.correct = np.empty(n), np.empty(n)
        self.label_probability, self.squares = np.empty(n), np.empty(n)
        self.class_one = np.empty(n) if k == 2 else None
        self.classwise = classwise  # False: no classwise ECE (``metrics`` leaves it out), nor its entries kept
        self.column_sums = np.zeros(k)
        self.keys: list[np.ndarray] = []
        self.values: list[np.ndarray] = []
        self.first_edge = np.linspace(0.0, 1.0, n_bins + 1)[1:2]

    def add(self, block: np.ndarray) -> None:
        """The next rows' probabilities (numpy, float32 or float64; rows summing to 1, entries >= 0)."""
        p = np.ascontiguousarray(block, dtype=np.float64)
        rows = slice(self.at, self.at + p.shape[0])
        self.at = rows.stop
        labels, index = self.labels[rows], np.arange(p.shape[0])
        predicted = p.argmax(axis=1)
        self.confidence[rows] = p[index, predicted]
        self.correct[rows] = predicted == labels
        self.label_probability[rows] = p[index, labels]
        self.squares[rows] = np.einsum("ij,ij->i", p, p)
        if self.class_one is not None:
            self.class_one[rows] = p[:, 1]
        if not self.classwise:
            return
        flat = np.flatnonzero(p.view(np.uint64) > self.first_edge.view(np.uint64))
        values = p.ravel()[flat]
        self.keys.append(flat % self.k * self.n_bins + equal_width_bin(values, self.n_bins))
        self.values.append(values)
        self.column_sums += np.einsum("ij->j", p)

    def classwise_ece(self) -> float:
        """``classwise_ece``: the mean over classes of each class's L1 binned error."""
        if not self.classwise:
            raise ValueError("these metrics were kept without classwise ECE")
        k, n_bins, n = self.k, self.n_bins, self.labels.shape[0]
        sums = np.bincount(np.concatenate(self.keys), weights=np.concatenate(self.values),
                           minlength=k * n_bins).reshape(k, n_bins)
        sums[:, 0] = self.column_sums - sums[:, 1:].sum(axis=1)
        hits = np.bincount(self.labels * n_bins + equal_width_bin(self.label_probability, n_bins),
                           minlength=k * n_bins)
        return float(np.abs(sums - hits.reshape(k, n_bins)).sum() / (n * k))

    def floored_labels(self) -> int:
        """Rows whose label got a probability at or below ``probability_floor.EPSILON`` (served
        floored: without the floor their NLL would be infinite or above ``log(1/EPSILON)``)."""
        return int(np.count_nonzero(self.label_probability <= EPSILON))

    def metrics(self) -> dict[str, float]:
        """Every metric of the report, as ``app.registry.reports.METRICS`` names them."""
        if self.at != self.labels.shape[0]:
            raise ValueError(f"{self.at} rows added for {self.labels.shape[0]} labels")
        confidence, correct, n_bins = self.confidence, self.correct, self.n_bins
        if self.class_one is not None:
            kde = kde_error(self.class_one, (self.labels == 1).astype(np.float64))
        else:
            kde = kde_error(confidence, correct)
        nll = float(-np.mean(np.log(np.maximum(self.label_probability, EPSILON))))
        mean_confidence, accuracy = float(np.mean(confidence)), float(np.mean(correct))
        return {
            "ece": _binned_error(equal_width_bin(confidence, n_bins), confidence, correct, n_bins, 1),
            "mce": maximum_error(confidence, correct, n_bins),
            "adaptive_ece": adaptive_error(confidence, correct, n_bins),
            **({"classwise_ece": self.classwise_ece()} if self.classwise else {}),
            "kde_ece": kde,
            "brier": float(np.mean(self.squares - 2.0 * self.label_probability + 1.0)),
            "nll": nll,
            "accuracy": accuracy,
            "mean_confidence": mean_confidence,
            "expectation_consistency_gap": float(np.mean(confidence) - np.mean(correct)),
        }

    def reliability_diagram(self):
        """``reliability_diagram`` (equal-width bins) of the rows added."""
        return diagram_of(self.confidence, self.correct, self.n_bins)
