"""Drift alarms that stay valid under continuous monitoring: an e-process on the top-label
calibration residual of a labelled stream, tested by betting.

The statistic of row ``t`` is its **top-label residual** ``r_t = max_j p_tj - [argmax_j p_tj = y_t]``
(confidence minus correctness, in ``[-1, 1]``; ties go to the first index as in ``accuracy``). Its
mean is ``mean_confidence - accuracy``: zero when the probabilities are calibrated in the mean, the
error of the model's own accuracy estimate (CBPE's "expected accuracy") otherwise.

**Null hypothesis** (composite, with a tolerance ``eps``): at every step,
``|E[r_t | past]| <= eps`` — the stream's accuracy stays within ``eps`` of what its calibrated
confidence predicts. **Test by betting** (Waudby-Smith & Ramdas 2023, "Estimating means of
bounded random variables by betting", JRSS-B, sections 3-5; Shafer & Vovk's game-theoretic
testing): a gambler starts with wealth ``K_0 = 1`` and at each step stakes a fraction
``lambda_t`` chosen from the past only (predictable), with the pay-off

    K_t = K_{t-1} * (1 + lambda_t * r_t - |lambda_t| * eps),      |lambda_t| <= c < 1/(1 + eps).

Under the null ``E[1 + lambda_t r_t - |lambda_t| eps | past] = 1 + lambda_t m_t - |lambda_t| eps <= 1``,
so ``K`` is a non-negative supermartingale and **Ville's inequality** gives

    P(there is a t with K_t >= 1/alpha) <= alpha

over an unbounded horizon: the alarm (the first ``t`` with ``K_t >= 1/alpha``) may be checked
after every label without inflating the false-alarm probability, unlike a fixed threshold on a
windowed ECE. The e-value ``K_t`` is evidence against the null (``1/K_t`` is an anytime-valid
p-value).

**The bet** is the approximate GRAPA plug-in of Waudby-Smith & Ramdas (eq. 26 there), with the mean
soft-thresholded by ``eps`` so that it stakes nothing while the stream looks calibrated:
``lambda_t = clip(S_eps(mu_{t-1}) / s2_{t-1}, -c, c)``, ``S_eps(m) = sign(m) max(|m| - eps, 0)``,
where ``mu`` and ``s2`` are exponentially weighted means of ``r`` and ``r^2`` with half-life
``half_life`` rows (started at 0 and ``1/4``), so that a shift late in a long stream is bet on
quickly. Any predictable bet keeps the guarantee; this one only decides the power.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .metrics._inputs import top_label_of

STATE_FIELDS = ("n", "mean", "second", "log_wealth", "max_log_wealth", "alarm_at")


def top_label_residuals(probs, labels) -> np.ndarray:
    """``max_j p_ij - [argmax_j p_ij = y_i]`` per row, in ``[-1, 1]`` (float64, on the host)."""
    confidence, correct = top_label_of(probs, labels)
    return np.asarray(confidence, dtype=np.float64) - np.asarray(correct, dtype=np.float64)


@dataclass
class DriftTest:
    """The betting e-process above, for one stream or for ``shape`` independent streams at once
    (every state array has that shape; ``update`` takes residuals of shape ``shape + (t,)``).

    ``alpha``: the false-alarm probability over the whole (unbounded) stream; ``tolerance``:
    ``eps``, the drift of ``mean_confidence - accuracy`` that is not an alarm; ``half_life``: rows
    after which an old residual weighs half in the bet; ``max_bet``: ``c``.
    """

    alpha: float = 0.01
    tolerance: float = 0.02
    half_life: float = 1000.0
    max_bet: float = 0.5
    shape: tuple = ()

    def __post_init__(self):
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must lie in (0, 1), got {self.alpha!r}")
        if not 0 <= self.tolerance < 1:
            raise ValueError(f"tolerance must lie in [0, 1), got {self.tolerance!r}")
        if not self.half_life > 0:
            raise ValueError(f"half_life must be positive, got {self.half_life!r}")
        if not 0 < self.max_bet < 1 / (1 + self.tolerance):
            raise ValueError(f"max_bet must lie in (0, 1/(1 + tolerance)), got {self.max_bet!r}")
        self.shape = tuple(self.shape)
        self.n = np.zeros(self.shape, dtype=np.int64)
        self.mean = np.zeros(self.shape)
        self.second = np.full(self.shape, 0.25)
        self.log_wealth = np.zeros(self.shape)
        self.max_log_wealth = np.zeros(self.shape)
        self.alarm_at = np.full(self.shape, -1, dtype=np.int64)  # rows seen when K first reached 1/alpha

    @property
    def threshold(self) -> float:
        """``log(1/alpha)``: the log-wealth at which the test alarms."""
        return math.log(1 / self.alpha)

    @property
    def alarmed(self) -> np.ndarray:
        return self.alarm_at >= 0

    @property
    def e_value(self) -> np.ndarray:
        return np.exp(self.log_wealth)

    def bet(self) -> np.ndarray:
        """``lambda_t`` from the past only."""
        excess = np.sign(self.mean) * np.maximum(np.abs(self.mean) - self.tolerance, 0.0)
        return np.clip(excess / np.maximum(self.second, 1e-12), -self.max_bet, self.max_bet)

    def update(self, residuals) -> DriftTest:
        """Feed residuals (``shape + (t,)``, each in ``[-1, 1]``), oldest first."""
        r = np.asarray(residuals, dtype=np.float64)
        if r.ndim == 0 or r.shape[:-1] != self.shape:
            raise ValueError(f"residuals must have shape {self.shape} + (t,), got {r.shape}")
        if r.size and (not np.all(np.isfinite(r)) or np.abs(r).max() > 1):
            raise ValueError("residuals must be finite and lie in [-1, 1]")
        keep = 2.0 ** (-1.0 / self.half_life)
        for t in range(r.shape[-1]):
            step = r[..., t]
            stake = self.bet()
            self.log_wealth += np.log1p(stake * step - np.abs(stake) * self.tolerance)
            np.maximum(self.max_log_wealth, self.log_wealth, out=self.max_log_wealth)
            self.n += 1
            crossed = (self.alarm_at < 0) & (self.log_wealth >= self.threshold)
            self.alarm_at = np.where(crossed, self.n, self.alarm_at)
            self.mean = keep * self.mean + (1 - keep) * step
            self.second = keep * self.second + (1 - keep) * step * step
        return self

    def to_dict(self) -> dict:
        """The options and the state of a single stream, as plain numbers (JSON-safe)."""
        if self.shape:
            raise ValueError("to_dict serialises a single stream (shape ())")
        return {"alpha": self.alpha, "tolerance": self.tolerance, "half_life": self.half_life,
                "max_bet": self.max_bet, **{f: self._scalar(f) for f in STATE_FIELDS}}

    def _scalar(self, field: str):
        value = getattr(self, field)
        return int(value) if value.dtype.kind == "i" else float(value)

    @classmethod
    def from_dict(cls, data: dict) -> DriftTest:
        test = cls(data["alpha"], data["tolerance"], data["half_life"], data["max_bet"])
        for field in STATE_FIELDS:
            setattr(test, field, np.asarray(data[field], dtype=getattr(test, field).dtype))
        return test


def drift_test(probs, labels, alpha: float = 0.01, tolerance: float = 0.02, half_life: float = 1000.0,
               max_bet: float = 0.5) -> DriftTest:
    """The e-process of one labelled stream (rows in arrival order), run to its end."""
    return DriftTest(alpha, tolerance, half_life, max_bet).update(top_label_residuals(probs, labels))
