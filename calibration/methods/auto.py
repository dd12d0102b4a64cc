"""``auto``: cross-validated method selection (``calibration.selection``), then the chosen method.

``fit`` compares the candidates by stratified K-fold cross-validation on the labelled data,
selects one by the rule of ``calibration.selection.select`` (lowest cross-validated NLL among
the eligible, Mix-n-Match guideline order among ties; a support guard refuses candidates whose
gain does not cover the tail risk they take against TS, and a more complex candidate must beat
the simplest class's pick by more than its fold-to-fold noise), refits it on
all the data and from then on behaves as it. ``summary()`` names the chosen method and why; the comparison table is kept
in ``comparison_`` (not stored with the parameters, which hold the chosen calibrator and the
selection).

Backends: the comparison and the chosen method's fit run on a host copy; the chosen method
predicts on the input's device.
"""

from __future__ import annotations

import numpy as np

from ..base import Calibrator, FitDiagnostics
from ..candidates import Candidate
from ..comparison import compare
from ..inputs import InputBatch
from ..options import INPUT_OPTION, Option
from ..registry import from_dict
from ..selection import Selection, select


class AutoCalibrator(Calibrator):
    """Picks the method by cross-validation, then acts as it."""

    method = "auto"
    description = (
        "Automatic choice: stratified K-fold comparison of candidate methods, then the lowest "
        "cross-validated NLL (Mix-n-Match guideline order among ties), refitted on all the data."
    )
    options_spec = (
        INPUT_OPTION,
        Option("candidates", list, [], "Methods to compare (names or {method, options, name}); "
               "empty means the default set for the data's size.", max_items=20),
        Option("folds", int, 5, "Cross-validation folds.", minimum=2, maximum=20),
        Option("seed", int, 0, "Seed of the fold assignment.", minimum=0),
        Option("preserve_accuracy", bool, False, "Only accuracy-preserving candidates."),
    )

    def __init__(self, **options):
        super().__init__(**options)
        self.accuracy_preserving = self.options["preserve_accuracy"]
        self.progress = None  # progress(done, total) after each cross-validation fit (a job's progress)
        # comparison_source(x, labels, candidates, folds, seed, kind) -> Comparison: where the
        # cross-validation runs instead of here (a job's parts on other workers; app.jobs.fan_out)
        self.comparison_source = None

    def _fit(self, scores: InputBatch, labels: np.ndarray) -> FitDiagnostics:
        kind = scores.source  # binary scores arrive as (n, 2) logits
        arguments = (scores.given, labels, self.options["candidates"] or None, self.options["folds"],
                     self.options["seed"], kind)
        self.comparison_ = (compare(*arguments, self.progress) if self.comparison_source is None
                            else self.comparison_source(*arguments))
        self.selection_ = select(self.comparison_, self.options["preserve_accuracy"])
        self.chosen_ = self.selection_.chosen.create(kind)
        self.chosen_.fit_batch(scores, labels, warn=False)
        self.accuracy_preserving = self.chosen_.accuracy_preserving
        inner = self.chosen_.diagnostics_
        return FitDiagnostics(inner.converged, inner.iterations, f"chose {self.selection_.chosen.name}: "
                              f"{inner.message}", inner.gradient_norm, inner.objective)

    def _predict(self, scores: InputBatch) -> np.ndarray:
        return self.chosen_._predict(scores)

    def _params(self) -> dict:
        return {"chosen": self.chosen_.to_dict(), "name": self.selection_.chosen.name,
                "reason": self.selection_.reason}

    def _set_params(self, params: dict) -> None:
        if not isinstance(params.get("name"), str) or not isinstance(params.get("reason"), str):
            raise ValueError("stored auto calibrator lacks the chosen name and reason")
        self.chosen_ = from_dict(params.get("chosen"))
        if self.chosen_.n_classes_ != self.n_classes_:
            raise ValueError("stored auto calibrator's chosen method has a different number of classes")
        candidate = Candidate(params["name"], self.chosen_.method, self.chosen_.options)
        self.selection_ = Selection(candidate, params["reason"], [], {})
        self.accuracy_preserving = self.chosen_.accuracy_preserving

    def summary(self) -> dict:
        return {"chosen": self.selection_.chosen.name, "method": self.chosen_.method,
                "reason": self.selection_.reason, **self.chosen_.summary()}
