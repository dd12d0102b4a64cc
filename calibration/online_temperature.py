"""Online temperature scaling: the multiclass counterpart of online Platt scaling
(``calibration.online``), for logits that arrive as a stream whose confidence drifts.

**Model**: ``p = softmax(beta z)`` with ``beta = 1 / T`` the inverse temperature, starting at
``beta = 1`` (the model unchanged); as in temperature scaling (Guo et al., ICML 2017) one
parameter, so the predicted class never changes (``beta > 0``).

**Update** (Online Newton Step, Hazan, Agarwal & Kale 2007, Algorithm 2, in one dimension; the
update Gupta & Ramdas (ICML 2023) use for Platt scaling): the log loss
``l_t(beta) = logsumexp(beta z_t) - beta z_{t, y_t}`` is convex in ``beta``, with gradient
``g_t = E_{p_t}[z_t] - z_{t, y_t}`` (the mean logit under the forecast minus the label's logit),
and exp-concave on the bounded interval ``K = [beta_min, beta_max]`` for bounded logits, so ONS
has ``O(log T)`` regret against the best fixed temperature in hindsight:

    A_t = A_{t-1} + g_t^2,   A_0 = epsilon,
    beta_{t+1} = clip(beta_t - g_t / (gamma A_t), beta_min, beta_max)

(the projection onto an interval in the norm of a positive scalar ``A`` is the clip). Each row
costs one softmax of its logits. ``gamma = 0.1``, ``epsilon = 1`` and ``K = [0.01, 100]`` are the
defaults; ``benchmarks/online_temperature.py`` measures them on drifting real streams against a
fixed and a windowed temperature refit.

Predictions are prequential: ``predict_update`` returns each row's forecast made *before* its
label is used.
"""

from __future__ import annotations

import math

import numpy as np


class OnlineTemperatureScaling:
    """Online temperature scaling by the Online Newton Step (see the module docstring)."""

    def __init__(self, gamma: float = 0.1, epsilon: float = 1.0, beta_min: float = 0.01, beta_max: float = 100.0):
        for name, value in (("gamma", gamma), ("epsilon", epsilon), ("beta_min", beta_min), ("beta_max", beta_max)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if not beta_min <= 1.0 <= beta_max:
            raise ValueError("beta_min <= 1 <= beta_max is needed (the start beta = 1 must lie inside)")
        self.gamma, self.epsilon = float(gamma), float(epsilon)
        self.beta_min, self.beta_max = float(beta_min), float(beta_max)
        self.beta_ = 1.0
        self.newton_ = self.epsilon  # A_t
        self.n_updates_ = 0

    @staticmethod
    def _logits(logits) -> np.ndarray:
        z = np.asarray(logits, dtype=np.float64)
        if z.ndim != 2 or z.shape[1] < 2 or not np.isfinite(z).all():
            raise ValueError("logits must be a finite (n, k) array with k >= 2")
        return z

    def predict_proba(self, logits) -> np.ndarray:
        """``softmax(beta z)`` with the current ``beta``, max-shifted, per row."""
        scaled = self._logits(logits) * self.beta_
        scaled -= scaled.max(axis=1, keepdims=True)
        np.exp(scaled, out=scaled)
        scaled /= scaled.sum(axis=1, keepdims=True)
        return scaled

    def predict_update(self, logits, labels) -> np.ndarray:
        """For each row in order: its forecast with the current ``beta``, then the ONS update on
        its label. Returns the forecasts, shape ``(n, k)``."""
        z = self._logits(logits)
        y = np.asarray(labels)
        if y.shape != (len(z),) or y.dtype.kind not in "iu" or (y < 0).any() or (y >= z.shape[1]).any():
            raise ValueError(f"labels must be integers in [0, {z.shape[1]}), one per row")
        out = np.empty_like(z)
        beta, newton, step = self.beta_, self.newton_, 1.0 / self.gamma
        for t in range(len(z)):
            row = z[t]
            scaled = beta * row
            e = np.exp(scaled - scaled.max())
            p = e / e.sum()
            out[t] = p
            g = float(p @ row) - float(row[y[t]])
            newton += g * g
            beta = min(max(beta - step * g / newton, self.beta_min), self.beta_max)
        self.beta_, self.newton_ = beta, newton
        self.n_updates_ += len(z)
        return out

    def update(self, logits, labels) -> OnlineTemperatureScaling:
        self.predict_update(logits, labels)
        return self
