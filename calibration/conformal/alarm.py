"""An anytime-valid alarm on the coverage of served prediction sets, from the miscoverage indicators
``e_t = [y_t not in C_t]`` of labelled rows, tested by betting.

**Null hypothesis** (composite, one-sided): at every step ``E[e_t | past] <= b``, ``b = alpha + tolerance``
(the sets miss the label no more often than the target miscoverage plus a tolerance). **Test by betting**
(Shafer & Vovk's game-theoretic testing; Waudby-Smith & Ramdas 2023, "Estimating means of bounded random
variables by betting", JRSS-B, sections 3-5): wealth ``K_0 = 1`` and, with a predictable stake
``0 <= lambda_t <= c / b`` (``c < 1``),

    K_t = K_{t-1} (1 + lambda_t (e_t - b)).

Each factor is positive (``e_t - b >= -b``) and has conditional mean ``1 + lambda_t (E[e_t | past] - b) <= 1``
under the null, so ``K`` is a non-negative supermartingale and **Ville's inequality** gives
``P(there is a t with K_t >= 1/delta) <= delta``: the alarm (the first ``t`` with ``K_t >= 1/delta``) may be
checked after every label, over an unbounded horizon, with false-alarm probability at most ``delta``.

**The stake** is the plug-in of ``calibration.monitoring`` (GRAPA-like, Waudby-Smith & Ramdas eq. 26):
``lambda_t = clip(max(mu_{t-1} - b, 0) / v_{t-1}, 0, c / b)`` with ``mu`` and ``v`` exponentially weighted
means (half-life ``half_life`` rows) of ``e`` and of ``(e - b)^2``, started at ``b`` and ``b (1 - b)``; it
stakes nothing while the observed miscoverage stays at or below ``b``. Any predictable stake keeps the
guarantee; this one decides the power.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..monitoring import _ewma


@dataclass
class CoverageAlarm:
    """The betting e-process above for ``shape`` independent streams at once (``()`` for one).

    ``alpha``: the target miscoverage of the sets; ``tolerance``: the excess miscoverage that is no
    alarm; ``delta``: the false-alarm probability over the whole stream; ``half_life`` and ``max_bet``
    (``c``) shape the stake."""

    alpha: float = 0.1
    tolerance: float = 0.02
    delta: float = 0.01
    half_life: float = 500.0
    max_bet: float = 0.5
    shape: tuple = ()

    def __post_init__(self):
        for name in ("alpha", "delta", "max_bet"):
            if not 0 < getattr(self, name) < 1:
                raise ValueError(f"{name} must lie in (0, 1), got {getattr(self, name)!r}")
        if not (self.tolerance >= 0 and self.alpha + self.tolerance < 1):
            raise ValueError(f"tolerance must be >= 0 with alpha + tolerance < 1, got {self.tolerance!r}")
        if not self.half_life > 0:
            raise ValueError(f"half_life must be positive, got {self.half_life!r}")
        self.shape = tuple(self.shape)
        b = self.bound
        self.n = np.zeros(self.shape, dtype=np.int64)
        self.mean, self.second = np.full(self.shape, b), np.full(self.shape, b * (1 - b))
        self.log_wealth, self.max_log_wealth = np.zeros(self.shape), np.zeros(self.shape)
        self.alarm_at = np.full(self.shape, -1, dtype=np.int64)  # rows seen when K first reached 1/delta

    @property
    def bound(self) -> float:
        """``b = alpha + tolerance``, the miscoverage rate the null allows."""
        return self.alpha + self.tolerance

    @property
    def threshold(self) -> float:
        return math.log(1 / self.delta)

    @property
    def alarmed(self) -> np.ndarray:
        return self.alarm_at >= 0

    def to_dict(self) -> dict:
        """The options and the e-process state as plain data (one stream: ``shape == ()``)."""
        if self.shape != ():
            raise ValueError("only a single-stream alarm (shape ()) is stored as plain data")
        return {"method": "coverage_alarm", "alpha": self.alpha, "tolerance": self.tolerance, "delta": self.delta,
                "half_life": self.half_life, "max_bet": self.max_bet, "n": int(self.n), "mean": float(self.mean),
                "second": float(self.second), "log_wealth": float(self.log_wealth),
                "max_log_wealth": float(self.max_log_wealth), "alarm_at": int(self.alarm_at)}

    @classmethod
    def from_dict(cls, data: dict) -> CoverageAlarm:
        if data.get("method") != "coverage_alarm":
            raise ValueError("not a stored coverage alarm")
        out = cls(float(data["alpha"]), float(data["tolerance"]), float(data["delta"]), float(data["half_life"]),
                  float(data["max_bet"]))
        state = [float(data[key]) for key in ("mean", "second", "log_wealth", "max_log_wealth")]
        if not all(math.isfinite(v) for v in state) or int(data["n"]) < 0:
            raise ValueError("a stored coverage alarm needs finite state and n >= 0")
        out.n, out.alarm_at = np.int64(data["n"]), np.int64(data["alarm_at"])
        out.mean, out.second, out.log_wealth, out.max_log_wealth = (np.float64(v) for v in state)
        return out

    def update(self, miscovered) -> CoverageAlarm:
        """Feed miscoverage indicators (``shape + (t,)``, 0/1 or bool), oldest first."""
        e = np.asarray(miscovered, dtype=np.float64)
        if e.ndim != len(self.shape) + 1 or e.shape[:-1] != self.shape:
            raise ValueError(f"miscovered must have shape {self.shape} + (t,), got {e.shape}")
        if e.size and not np.all((e == 0) | (e == 1)):
            raise ValueError("miscovered must hold 0/1 indicators")
        if e.shape[-1] == 0:
            return self
        b = self.bound
        keep = 2.0 ** (-1.0 / self.half_life)
        mean, self.mean = _ewma(e, self.mean, keep, -1)
        second, self.second = _ewma((e - b) ** 2, self.second, keep, -1)
        stake = np.clip(np.maximum(mean - b, 0.0) / np.maximum(second, 1e-12), 0.0, self.max_bet / b)
        path = self.log_wealth[..., None] + np.cumsum(np.log1p(stake * (e - b)), axis=-1)
        crossed = path >= self.threshold
        first = np.argmax(crossed, axis=-1)
        self.alarm_at = np.where((self.alarm_at < 0) & crossed.any(axis=-1), self.n + first + 1, self.alarm_at)
        self.max_log_wealth = np.maximum(self.max_log_wealth, path.max(axis=-1))
        self.log_wealth = path[..., -1].copy()
        self.n = self.n + e.shape[-1]
        return self
