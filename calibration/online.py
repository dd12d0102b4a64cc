"""Online Platt scaling (OPS) and calibeating by tracking, for binary scores that arrive as a
stream (Gupta & Ramdas, "Online Platt Scaling with Calibeating", ICML 2023).

**Model**: ``P(y = 1 | s) = sigma(a s + b)`` with ``s`` the base model's log-odds of class 1 (the
core's binary ``scores``), ``theta = (a, b)`` starting at ``(1, 0)`` (the base model unchanged).

**Update** (Online Newton Step, Hazan, Agarwal & Kale 2007, "Logarithmic regret algorithms for
online convex optimization", Algorithm 2 there; Algorithm 1 of Gupta & Ramdas): after row ``t``,
with ``z_t = (s_t, 1)``, ``p_t = sigma(theta_t . z_t)`` and the log-loss gradient
``g_t = (p_t - y_t) z_t``,

    A_t = A_{t-1} + g_t g_t^T,            A_0 = epsilon I,
    theta_{t+1} = Pi_K^{A_t}( theta_t - (1/gamma) A_t^{-1} g_t ),

where ``Pi_K^{A}`` is the projection in the norm ``||x||_A = sqrt(x^T A x)`` onto
``K = {||theta||_2 <= radius}``: ``(A + lambda I)^{-1} A y`` with ``lambda >= 0`` solved so that
the norm is ``radius`` (a monotone 1-D equation, by bisection in the eigenbasis of ``A``). The
log loss is exp-concave on ``K`` (scores bounded), so ONS has ``O(log T)`` regret against the best
fixed ``(a, b)`` in hindsight; with ``gamma`` fixed the step also tracks a drifting optimum. Each
update costs a few dozen floating-point operations: cheap enough for every joined label.
``gamma = 0.1``, ``epsilon = 1`` and ``radius = 100`` are this module's defaults (the paper
tunes them per experiment).

**Calibeating by tracking** (TOPS; Foster & Hart 2023, "Calibeating": beating forecasters at their
own game; Gupta & Ramdas section 4): the OPS forecast ``q_t`` is put into one of ``n_bins``
equal-width bins of ``[0, 1]`` and the forecast is replaced by the mean label of the earlier rows
whose OPS forecast fell into the same bin (``q_t`` itself while that bin is empty). Its Brier
score beats the base forecaster's by (asymptotically) the sharpness it has lost to calibration.
The hedging variant (HOPS) is not implemented.

Predictions are prequential: ``predict_update`` returns each row's forecast made *before* its
label is used, which is what a served prediction is.
"""

from __future__ import annotations

import math

import numpy as np

FORMAT_VERSION = 1


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def _project(a11: float, a12: float, a22: float, y1: float, y2: float, radius: float) -> tuple[float, float]:
    """``argmin_{||x|| <= radius} (x - y)^T A (x - y)`` for the 2x2 positive definite ``A``."""
    if math.hypot(y1, y2) <= radius:
        return y1, y2
    # eigenbasis of A: theta(lambda) = Q diag(l_i / (l_i + lambda)) Q^T y, its norm decreases in lambda
    half_trace, det = (a11 + a22) / 2.0, a11 * a22 - a12 * a12
    root = math.sqrt(max(half_trace * half_trace - det, 0.0))
    l1, l2 = half_trace + root, half_trace - root
    v1 = (l1 - a22, a12) if abs(a12) > 1e-300 else (1.0, 0.0) if a11 >= a22 else (0.0, 1.0)
    norm = math.hypot(*v1)
    q1 = (v1[0] / norm, v1[1] / norm)
    q2 = (-q1[1], q1[0])
    c1, c2 = q1[0] * y1 + q1[1] * y2, q2[0] * y1 + q2[1] * y2

    def size(lam: float) -> float:
        return math.hypot(l1 * c1 / (l1 + lam), l2 * c2 / (l2 + lam))

    low, high = 0.0, max(l1, 1e-12)
    while size(high) > radius:
        high *= 2.0
    for _ in range(100):
        middle = (low + high) / 2.0
        low, high = (middle, high) if size(middle) > radius else (low, middle)
    w1, w2 = l1 * c1 / (l1 + high), l2 * c2 / (l2 + high)
    return q1[0] * w1 + q2[0] * w2, q1[1] * w1 + q2[1] * w2


class OnlinePlattScaling:
    """Online Platt scaling by the Online Newton Step (see the module docstring)."""

    method = "online_platt"

    def __init__(self, gamma: float = 0.1, epsilon: float = 1.0, radius: float = 100.0):
        for name, value in (("gamma", gamma), ("epsilon", epsilon), ("radius", radius)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if radius < 1:
            raise ValueError("radius must be at least 1 (the start (1, 0) must lie inside)")
        self.gamma, self.epsilon, self.radius = float(gamma), float(epsilon), float(radius)
        self.coef_ = (1.0, 0.0)
        self.hessian_ = (self.epsilon, 0.0, self.epsilon)  # A_t as (a11, a12, a22)
        self.n_updates_ = 0

    @staticmethod
    def _scores(scores) -> np.ndarray:
        s = np.asarray(scores, dtype=np.float64)
        if s.ndim != 1 or not np.isfinite(s).all():
            raise ValueError("scores must be a 1-D array of finite log-odds")
        return s

    def predict_proba(self, scores) -> np.ndarray:
        """``sigma(a s + b)`` with the current parameters, per row."""
        a, b = self.coef_
        return 1.0 / (1.0 + np.exp(-(a * self._scores(scores) + b)))

    def predict_update(self, scores, labels) -> np.ndarray:
        """For each row in order: its forecast with the parameters so far, then the ONS update on
        its label. Returns the forecasts (prequential)."""
        s = self._scores(scores)
        y = np.asarray(labels)
        if y.shape != s.shape or not np.isin(y, (0, 1)).all():
            raise ValueError("labels must be 0 or 1, one per score")
        out = np.empty(len(s))
        (a, b), (h11, h12, h22) = self.coef_, self.hessian_
        step = 1.0 / self.gamma
        for t, (score, label) in enumerate(zip(s.tolist(), y.tolist(), strict=True)):
            p = _sigmoid(a * score + b)
            out[t] = p
            g1, g2 = (p - label) * score, p - label
            h11, h12, h22 = h11 + g1 * g1, h12 + g1 * g2, h22 + g2 * g2
            det = h11 * h22 - h12 * h12
            d1, d2 = (h22 * g1 - h12 * g2) / det, (h11 * g2 - h12 * g1) / det  # A^{-1} g
            a, b = _project(h11, h12, h22, a - step * d1, b - step * d2, self.radius)
        self.coef_, self.hessian_ = (a, b), (h11, h12, h22)
        self.n_updates_ += len(s)
        return out

    def update(self, scores, labels) -> OnlinePlattScaling:
        self.predict_update(scores, labels)
        return self

    def to_dict(self) -> dict:
        return {"method": self.method, "format_version": FORMAT_VERSION,
                "options": {"gamma": self.gamma, "epsilon": self.epsilon, "radius": self.radius},
                "params": {"coef": list(self.coef_), "hessian": list(self.hessian_), "n_updates": self.n_updates_}}

    @classmethod
    def from_dict(cls, data: dict) -> OnlinePlattScaling:
        if data.get("method") != cls.method or data.get("format_version") != FORMAT_VERSION:
            raise ValueError("not an online_platt calibrator of format version 1")
        made = cls(**data["options"])
        params = data["params"]
        a, b = (float(v) for v in params["coef"])
        h11, h12, h22 = (float(v) for v in params["hessian"])
        made.coef_, made.hessian_ = (a, b), (h11, h12, h22)
        made.n_updates_ = int(params["n_updates"])
        return made


class TrackingCalibeater:
    """Calibeating by tracking: a forecast in bin ``j`` is replaced by the mean label of the
    earlier rows forecast into bin ``j`` (the forecast itself while the bin is empty)."""

    def __init__(self, n_bins: int = 10):
        if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
            raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
        self.n_bins = n_bins
        self.counts_ = np.zeros(n_bins, dtype=np.int64)
        self.positives_ = np.zeros(n_bins, dtype=np.int64)

    def bins(self, forecasts) -> np.ndarray:
        """Equal-width bins ``(lo, hi]`` of [0, 1], 0 in the first (the core's convention)."""
        return np.clip(np.ceil(np.asarray(forecasts, dtype=np.float64) * self.n_bins).astype(np.int64) - 1,
                       0, self.n_bins - 1)

    def predict_update(self, forecasts, labels) -> np.ndarray:
        f = np.asarray(forecasts, dtype=np.float64)
        y = np.asarray(labels).astype(np.int64)
        out = np.empty(len(f))
        for t, (j, forecast, label) in enumerate(zip(self.bins(f).tolist(), f.tolist(), y.tolist(), strict=True)):
            count = self.counts_[j]
            out[t] = self.positives_[j] / count if count else forecast
            self.counts_[j] += 1
            self.positives_[j] += label
        return out
