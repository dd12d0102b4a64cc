"""Class-based temperature scaling (Frenkel & Goldberger, "Network calibration by
class-based temperature scaling", EUSIPCO 2021).

Each row is divided by the temperature of its predicted class (the argmax of its logits,
first index among ties): ``p_i = softmax(z_i / T_{c(i)})``. The temperatures minimise the
validation top-label ECE (equal-width bins, ``n_bins``): all start at the NLL-optimal single
temperature; then, class by class, ``T_c`` takes the value on a log-spaced grid of
``grid_size`` points over ``[T/span, T·span]`` that gives the lowest ECE with the other
temperatures fixed (the current value is kept on ties). Rounds repeat until one changes no
temperature (converged) or ``max_rounds`` is reached. ECE is piecewise constant, so this is a
coordinate-wise grid search, not a gradient method.

Accuracy-preserving: each row is divided by a positive number, which keeps its order.

Backends: prediction on the input's device; the fit runs on a float64 host copy.
"""

from __future__ import annotations

import numpy as np

from ..base import Calibrator, FitDiagnostics, on_device, param_array
from ..inputs import InputBatch
from ..metrics.binned import equal_width_bin
from ..options import INPUT_OPTION, Option
from ..softmax import softmax
from .shifted_logits import ShiftedLogits
from .temperature import solve_nll_temperature


class ClassTemperatureScaling(Calibrator):
    """One temperature per predicted class, chosen to minimise validation ECE."""

    method = "class_temperature"
    description = (
        "Class-based temperature scaling (Frenkel & Goldberger 2021): one temperature per "
        "predicted class, chosen by grid search to minimise validation ECE."
    )
    options_spec = (
        INPUT_OPTION,
        Option("n_bins", int, 15, "Equal-width bins of the ECE that is minimised.", minimum=1,
               maximum=1000),
        Option("grid_size", int, 41, "Candidate temperatures per class.", minimum=2, maximum=1000),
        Option("span", float, 4.0, "Candidates range over [T/span, T*span] around the global T.",
               exclusive_minimum=1.0),
        Option("max_rounds", int, 10, "Rounds over all classes at most.", minimum=1, maximum=100),
    )
    accuracy_preserving = True

    def _fit(self, scores: InputBatch, labels: np.ndarray) -> FitDiagnostics:
        n_bins, grid_size = self.options["n_bins"], self.options["grid_size"]
        span, max_rounds = self.options["span"], self.options["max_rounds"]
        shifted = ShiftedLogits(scores.logits, labels)
        global_t, _ = solve_nll_temperature(shifted)
        predicted = scores.logits.argmax(axis=1)
        correct = (predicted == labels).astype(np.float64)
        temperatures = np.full(scores.k, global_t)
        grid = global_t * np.logspace(-np.log10(span), np.log10(span), grid_size)
        members = [np.flatnonzero(predicted == c) for c in range(scores.k)]

        def contributions(rows: np.ndarray, t: float) -> np.ndarray:
            confidence = 1.0 / np.exp(shifted.d_rows(rows) / t).sum(axis=1)
            return np.bincount(equal_width_bin(confidence, n_bins),
                               weights=confidence - correct[rows], minlength=n_bins)

        current = {c: contributions(rows, global_t) for c, rows in enumerate(members) if len(rows)}
        totals = sum(current.values())
        converged, rounds = False, 0
        while rounds < max_rounds and not converged:
            rounds += 1
            converged = True
            for c, rows in enumerate(members):
                if not len(rows):
                    continue
                rest = totals - current[c]
                best_t, best_part = temperatures[c], current[c]
                best_error = np.abs(rest + best_part).sum()
                for t in grid:
                    part = contributions(rows, t)
                    error = np.abs(rest + part).sum()
                    if error < best_error - 1e-15:
                        best_t, best_part, best_error = t, part, error
                if best_t != temperatures[c]:
                    converged = False
                    temperatures[c], current[c] = best_t, best_part
                    totals = rest + best_part
        self.temperatures_ = temperatures
        message = (f"a round changed no temperature after {rounds} rounds" if converged
                   else f"temperatures still changing after {max_rounds} rounds")
        return FitDiagnostics(converged, rounds, message,
                              objective=float(np.abs(totals).sum() / scores.n))

    def _predict(self, scores: InputBatch) -> np.ndarray:
        xp = scores.xp
        t = xp.take(on_device(self.temperatures_, scores), xp.argmax(scores.logits, axis=1))
        return softmax(scores.logits / t[:, None])

    def _params(self) -> dict:
        return {"temperatures": self.temperatures_.tolist()}

    def _set_params(self, params: dict) -> None:
        t = param_array(params, "temperatures", (self.n_classes_,))
        if np.any(t <= 0):
            raise ValueError("stored temperatures must be positive")
        self.temperatures_ = t
