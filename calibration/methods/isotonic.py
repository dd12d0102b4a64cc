"""Isotonic-regression calibrators (Zadrozny & Elkan 2002; Mix-n-Match, Zhang et al. 2020).

An isotonic map is the non-decreasing function minimising the squared error of 0/1 targets
against scores, computed by the pool-adjacent-violators algorithm (``scipy.optimize.
isotonic_regression``) after pooling equal scores. As in scikit-learn's
``IsotonicRegression``, it is stored as knots (the first and last score of each constant
block) and applied by linear interpolation between knots, constant outside them. The
interpolation is clamped to each segment's end values so that it is monotone in floating
point too.

* ``isotonic_multiclass`` — IRM (Mix-n-Match §3.3): one map ``g`` fitted to all n·k pairs
  ``(p_ij, [y_i = j])``, made strictly increasing as ``g(p) + 1e-9·p`` (the paper's code),
  applied to every entry and renormalised. Strict increase keeps each row's order, so IRM is
  accuracy-preserving; the paper's code leaves rows unnormalised, this one does not.
* ``isotonic_one_vs_all`` — IROvA: one map per class fitted to ``(p_ij, [y_i = j])``,
  renormalised; a row that every map sends to 0 becomes uniform. Not accuracy-preserving.

Fitting sorts the pooled scores (``np.sort``, not a full ``argsort``; the positives are
located with ``searchsorted``), then runs PAVA on the distinct values.

Backends: PAVA fits on a float64 host copy; prediction (``searchsorted`` and linear
interpolation through the knots) runs on the input's device.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import isotonic_regression

from ..backend import column, namespace
from ..base import Calibrator, FitDiagnostics, normalise_rows, on_device, param_array
from ..inputs import Scores

STRICT_SLOPE = 1e-9


def fit_isotonic_binary(x: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Knots ``(xs, ys)`` of the isotonic regression of the 0/1 targets ``positive`` on ``x``."""
    ordered = np.sort(x)
    new_value = np.empty(len(ordered), dtype=bool)
    new_value[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new_value[1:])
    starts = np.flatnonzero(new_value)
    values = ordered[starts]
    counts = np.diff(np.append(starts, len(ordered)))
    hits = np.bincount(np.searchsorted(values, x[positive]), minlength=len(values))
    fitted = isotonic_regression(hits / counts, weights=counts.astype(np.float64)).x
    if len(values) <= 2:
        return values, fitted
    inner = (fitted[1:-1] != fitted[:-2]) | (fitted[1:-1] != fitted[2:])
    keep = np.concatenate([[True], inner, [True]])
    return values[keep], fitted[keep]


def interpolate_monotone(x: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Piecewise-linear interpolation through the knots, constant outside them, clamped to
    each segment's end values (so non-decreasing knots give a non-decreasing result)."""
    xp = namespace(x)
    if xs.shape[0] == 1:
        return xp.full_like(x, float(ys[0]))
    flat = xp.reshape(x, (-1,))
    segment = xp.clip(xp.searchsorted(xs, flat, side="right") - 1, min=0, max=xs.shape[0] - 2)
    x0, x1 = xp.take(xs, segment), xp.take(xs, segment + 1)
    y0, y1 = xp.take(ys, segment), xp.take(ys, segment + 1)
    t = xp.clip((flat - x0) / (x1 - x0), min=0.0, max=1.0)
    value = xp.minimum(xp.maximum(y0 + (y1 - y0) * t, y0), y1)
    return xp.reshape(value, x.shape)


def _knot_params(xs, ys) -> dict:
    return {"x": xs.tolist(), "y": ys.tolist()}


def _read_knots(raw) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(raw, dict):
        raise ValueError("stored isotonic knots must be a dict with 'x' and 'y'")
    size = len(raw.get("x", []))
    xs, ys = param_array(raw, "x", (size,)), param_array(raw, "y", (size,))
    if size == 0 or np.any(np.diff(xs) <= 0) or np.any(np.diff(ys) < 0):
        raise ValueError("stored isotonic knots must be increasing in x and non-decreasing in y")
    return xs, ys


class IsotonicMulticlass(Calibrator):
    """IRM: one strictly increasing isotonic map for all classes; see the module docstring."""

    method = "isotonic_multiclass"
    description = (
        "Multi-class isotonic regression, IRM (Zhang et al. 2020): one strictly increasing "
        "isotonic map fitted to all classes' probabilities, renormalised."
    )
    accuracy_preserving = True

    def _fit(self, scores: Scores, labels: np.ndarray) -> FitDiagnostics:
        p = scores.probabilities
        positive = np.zeros(p.shape, dtype=bool)
        positive[np.arange(scores.n), labels] = True
        self.knots_x_, self.knots_y_ = fit_isotonic_binary(p.ravel(), positive.ravel())
        return FitDiagnostics(True, 1, "exact (pool adjacent violators)")

    def _predict(self, scores: Scores) -> np.ndarray:
        p = scores.probabilities
        xs, ys = on_device(self.knots_x_, scores), on_device(self.knots_y_, scores)
        return normalise_rows(interpolate_monotone(p, xs, ys) + STRICT_SLOPE * p)

    def _params(self) -> dict:
        return {"knots": _knot_params(self.knots_x_, self.knots_y_)}

    def _set_params(self, params: dict) -> None:
        self.knots_x_, self.knots_y_ = _read_knots(params.get("knots"))

    def summary(self) -> dict:
        return {"n_knots": len(self.knots_x_)}


class IsotonicOneVsAll(Calibrator):
    """IROvA: one isotonic map per class, renormalised; see the module docstring."""

    method = "isotonic_one_vs_all"
    description = (
        "One-vs-all isotonic regression, IROvA (Zadrozny & Elkan 2002): one isotonic map per "
        "class, renormalised."
    )

    def _fit(self, scores: Scores, labels: np.ndarray) -> FitDiagnostics:
        p = scores.probabilities
        self.knots_ = [fit_isotonic_binary(p[:, j], labels == j) for j in range(scores.k)]
        return FitDiagnostics(True, 1, "exact (pool adjacent violators)")

    def _predict(self, scores: Scores) -> np.ndarray:
        p = scores.probabilities
        mapped = scores.xp.stack([interpolate_monotone(column(p, j), on_device(xs, scores), on_device(ys, scores))
                                  for j, (xs, ys) in enumerate(self.knots_)], axis=1)
        return normalise_rows(mapped)

    def _params(self) -> dict:
        return {"knots": [_knot_params(xs, ys) for xs, ys in self.knots_]}

    def _set_params(self, params: dict) -> None:
        knots = params.get("knots")
        if not isinstance(knots, list) or len(knots) != self.n_classes_:
            raise ValueError(f"stored IROvA parameters need {self.n_classes_} sets of knots")
        self.knots_ = [_read_knots(raw) for raw in knots]

    def summary(self) -> dict:
        return {"n_knots": [len(xs) for xs, _ in self.knots_]}
