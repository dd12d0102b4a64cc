"""Online Platt scaling (OPS), optionally with calibeating by tracking (TOPS), as a calibrator
whose parameters keep moving with the labels that arrive after it was fitted (Gupta & Ramdas,
"Online Platt Scaling with Calibeating", ICML 2023).

Binary only (k = 2, including binary ``scores``). With ``s = z_1 - z_0`` the log-odds of
class 1, the forecast is ``q = sigma(a s + b)``; ``theta = (a, b)`` starts at ``(1, 0)`` (the
base model unchanged) and follows each labelled row by one Online Newton Step (Hazan, Agarwal &
Kale 2007, Algorithm 2; Gupta & Ramdas, Algorithm 1):

    g_t = (q_t - y_t) (s_t, 1),   A_t = A_{t-1} + g_t g_t^T,   A_0 = epsilon I,
    theta_{t+1} = Pi_K^{A_t}( theta_t - (1/gamma) A_t^{-1} g_t ),   K = {||theta|| <= radius}.

With ``calibeating="tracking"`` (TOPS; Foster & Hart 2023, "Calibeating") the OPS forecast is put
into one of ``n_bins`` equal-width bins of [0, 1] and replaced by the mean label of the earlier
rows whose OPS forecast fell into that bin (the OPS forecast itself while the bin is empty).

**Fit** = the stream's beginning: the validation rows are passed through the updates in the order
given (prequentially, each forecast made before its label is used), so a fit is deterministic and
never diverges (the projection keeps ``theta`` in ``K``). **Update** (``update_batch``): the
same pass over rows labelled later; the service stores each update batch as a new version, so that
every served prediction names parameters that can be read back. The update equations live in
``calibration.online``; this class makes them a stored, served calibrator.

Not accuracy-preserving: for a binary problem any increasing map keeps the argmax only when it
keeps the 0.5 crossing, which OPS does not. The fit is on the host in float64.
"""

from __future__ import annotations

import numpy as np

from ..backend import from_host, to_host
from ..base import Calibrator, FitDiagnostics, param_array, param_float
from ..inputs import InputBatch, check_labels
from ..online import OnlinePlattScaling, TrackingCalibeater
from ..options import INPUT_OPTION, Option


class OnlinePlattCalibrator(Calibrator):
    """Online Platt scaling with optional calibeating; see the module docstring."""

    method = "online_platt"
    description = (
        "Online Platt scaling (Gupta & Ramdas 2023): sigmoid(a*s + b) updated by an Online Newton Step "
        "with every labelled row, also after the fit; calibeating='tracking' gives TOPS. Binary only."
    )
    options_spec = (
        INPUT_OPTION,
        Option("gamma", float, 0.1, "ONS step scale: each step is (1/gamma) A^-1 g.", exclusive_minimum=0.0,
               maximum=1e6),
        Option("epsilon", float, 1.0, "A_0 = epsilon * I, the ONS regulariser.", exclusive_minimum=0.0,
               maximum=1e6),
        Option("radius", float, 100.0, "theta is projected onto ||(a, b)|| <= radius.", minimum=1.0,
               maximum=1e6),
        Option("calibeating", str, "none", "'tracking' replaces each forecast by the mean label of its "
               "bin so far (TOPS).", choices=("none", "tracking")),
        Option("n_bins", int, 10, "Equal-width bins of [0, 1] for calibeating.", minimum=1, maximum=1000),
    )
    updates_online = True

    def _ops(self) -> OnlinePlattScaling:
        return OnlinePlattScaling(self.options["gamma"], self.options["epsilon"], self.options["radius"])

    @staticmethod
    def _log_odds(scores: InputBatch) -> np.ndarray:
        if scores.k != 2:
            raise ValueError(f"online_platt is binary only; the input has {scores.k} classes")
        logits = to_host(scores.logits).astype(np.float64, copy=False)
        return logits[:, 1] - logits[:, 0]

    def _fit(self, scores: InputBatch, labels: np.ndarray) -> FitDiagnostics:
        self.ops_ = self._ops()
        self.tracker_ = TrackingCalibeater(self.options["n_bins"])
        self._pass(self._log_odds(scores), labels)
        return FitDiagnostics(True, scores.n, f"one online Newton pass over {scores.n} rows")

    def _pass(self, s: np.ndarray, labels: np.ndarray) -> np.ndarray:
        forecasts = self.ops_.predict_update(s, labels)
        beaten = self.tracker_.predict_update(forecasts, labels)
        return beaten if self.options["calibeating"] == "tracking" else forecasts

    def update_batch(self, scores: InputBatch, labels: np.ndarray) -> np.ndarray:
        """Update on rows labelled after the fit, in order; returns each row's forecast made before
        its own label was used (what serving it would have answered), shape ``(n, 2)``."""
        self._check_fitted()
        labels = check_labels(labels, scores.n, 2)
        forecasts = self._pass(self._log_odds(scores), labels)
        self.n_samples_ += scores.n
        return np.stack([1.0 - forecasts, forecasts], axis=1)

    def _predict(self, scores: InputBatch) -> np.ndarray:
        q = self.ops_.predict_proba(self._log_odds(scores))
        if self.options["calibeating"] == "tracking":
            bins = self.tracker_.bins(q)
            counts = self.tracker_.counts_[bins]
            q = np.where(counts > 0, self.tracker_.positives_[bins] / np.maximum(counts, 1), q)
        out = np.stack([1.0 - q, q], axis=1)
        return out if scores.xp is np else from_host(out, getattr(scores, scores.source))

    def _params(self) -> dict:
        return {"slope": self.ops_.coef_[0], "intercept": self.ops_.coef_[1],
                "newton_matrix": list(self.ops_.hessian_), "n_updates": self.ops_.n_updates_,
                "bin_counts": self.tracker_.counts_.tolist(), "bin_positives": self.tracker_.positives_.tolist()}

    def _set_params(self, params: dict) -> None:
        self.ops_ = self._ops()
        self.ops_.coef_ = (param_float(params, "slope"), param_float(params, "intercept"))
        matrix = param_array(params, "newton_matrix", (3,))
        if not (matrix[0] > 0 and matrix[0] * matrix[2] - matrix[1] ** 2 > 0):
            raise ValueError("stored parameter 'newton_matrix' is not positive definite")
        h11, h12, h22 = (float(v) for v in matrix)  # shape (3,), checked above
        self.ops_.hessian_ = (h11, h12, h22)
        self.ops_.n_updates_ = int(param_float(params, "n_updates"))
        n_bins = self.options["n_bins"]
        self.tracker_ = TrackingCalibeater(n_bins)
        counts = param_array(params, "bin_counts", (n_bins,))
        positives = param_array(params, "bin_positives", (n_bins,))
        if (counts < 0).any() or (positives < 0).any() or (positives > counts).any():
            raise ValueError("stored calibeating bins must satisfy 0 <= positives <= counts")
        self.tracker_.counts_, self.tracker_.positives_ = counts.astype(np.int64), positives.astype(np.int64)

    def summary(self) -> dict:
        self._check_fitted()
        return {"slope": self.ops_.coef_[0], "intercept": self.ops_.coef_[1], "n_updates": self.ops_.n_updates_,
                "calibeating": self.options["calibeating"]}
