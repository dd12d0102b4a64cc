"""Online temperature scaling as a calibrator whose temperature keeps moving with the labels that
arrive after it was fitted: ``softmax(beta z)``, ``beta = 1 / T`` updated by a one-dimensional
Online Newton Step on each labelled row (the update and its references are in
``calibration.online_temperature``; Guo et al. 2017 for the model, Hazan, Agarwal & Kale 2007 for
ONS, Gupta & Ramdas 2023 for the online-calibration setting).

**Fit** = the stream's beginning: ``beta`` starts at 1 and the validation rows are passed through
the updates in the order given (prequentially), so a fit is deterministic and ``beta`` stays in
``[beta_min, beta_max]``. **Update** (``update_batch``): the same pass over rows labelled later; the
service stores each update batch as a new version.

Any number of classes; logits, probabilities (their logs are logits up to a per-row constant, which
the softmax ignores) or binary scores. Accuracy-preserving: ``beta > 0`` keeps every row's order.
The fit and prediction run on the host in float64.
"""

from __future__ import annotations

import numpy as np

from ..backend import from_host, to_host
from ..base import Calibrator, FitDiagnostics, param_float
from ..inputs import InputBatch, check_labels
from ..online_temperature import OnlineTemperatureScaling
from ..options import INPUT_OPTION, Option


class OnlineTemperatureCalibrator(Calibrator):
    """Online temperature scaling; see the module docstring."""

    method = "online_temperature"
    description = (
        "Online temperature scaling: softmax(z / T) with 1/T updated by an Online Newton Step with every "
        "labelled row, also after the fit; accuracy-preserving."
    )
    options_spec = (
        INPUT_OPTION,
        Option("gamma", float, 0.1, "ONS step scale: each step is g / (gamma * A).", exclusive_minimum=0.0,
               maximum=1e6),
        Option("epsilon", float, 1.0, "A_0, the ONS regulariser.", exclusive_minimum=0.0, maximum=1e6),
        Option("beta_min", float, 0.01, "Smallest inverse temperature 1/T.", exclusive_minimum=0.0, maximum=1.0),
        Option("beta_max", float, 100.0, "Largest inverse temperature 1/T.", minimum=1.0, maximum=1e6),
    )
    accuracy_preserving = True
    updates_online = True

    def _ots(self) -> OnlineTemperatureScaling:
        o = self.options
        return OnlineTemperatureScaling(o["gamma"], o["epsilon"], o["beta_min"], o["beta_max"])

    @staticmethod
    def _logits(scores: InputBatch) -> np.ndarray:
        return to_host(scores.logits).astype(np.float64, copy=False)

    def _fit(self, scores: InputBatch, labels: np.ndarray) -> FitDiagnostics:
        self.ots_ = self._ots()
        self.ots_.predict_update(self._logits(scores), labels)
        return FitDiagnostics(True, scores.n, f"one online Newton pass over {scores.n} rows")

    def update_batch(self, scores: InputBatch, labels: np.ndarray) -> np.ndarray:
        """Update on rows labelled after the fit, in order; returns each row's forecast made before
        its own label was used, shape ``(n, k)``."""
        self._check_fitted()
        if scores.k != self.n_classes_:
            raise ValueError(f"this calibrator was fitted on {self.n_classes_} classes; the input has {scores.k}")
        labels = check_labels(labels, scores.n, scores.k)
        forecasts = self.ots_.predict_update(self._logits(scores), labels)
        self.n_samples_ += scores.n
        return forecasts

    def _predict(self, scores: InputBatch) -> np.ndarray:
        out = self.ots_.predict_proba(self._logits(scores))
        return out if scores.xp is np else from_host(out, getattr(scores, scores.source))

    @property
    def temperature_(self) -> float:
        return 1.0 / self.ots_.beta_

    def _params(self) -> dict:
        return {"inverse_temperature": self.ots_.beta_, "newton": self.ots_.newton_, "n_updates": self.ots_.n_updates_}

    def _set_params(self, params: dict) -> None:
        self.ots_ = self._ots()
        beta = param_float(params, "inverse_temperature", positive=True)
        if not self.ots_.beta_min <= beta <= self.ots_.beta_max:
            raise ValueError("stored parameter 'inverse_temperature' is outside [beta_min, beta_max]")
        self.ots_.beta_ = beta
        self.ots_.newton_ = param_float(params, "newton", positive=True)
        self.ots_.n_updates_ = int(param_float(params, "n_updates"))

    def summary(self) -> dict:
        self._check_fitted()
        return {"temperature": self.temperature_, "inverse_temperature": self.ots_.beta_,
                "n_updates": self.ots_.n_updates_}
