"""Online conformal sets that keep their long-run coverage under distribution shift, updated from
labelled rows as they arrive: adaptive conformal inference (ACI) and its step-size-free variant DtACI.

Both keep the calibration scores ``S_1..S_n`` (non-randomised LAC/APS/RAPS, ``calibration.conformal
.scores``) and serve the split-conformal set at a *moving* level ``alpha_t``:
``C_t = {y : s(x_t, y) <= Q(alpha_t)}`` with ``Q(a) = S_(ceil((n + 1)(1 - a)))`` for ``0 < a < 1``,
``Q(a) = +inf`` (all classes) for ``a <= 0`` or when the rank exceeds ``n``, and ``Q(a) = -inf`` (the
empty set) for ``a >= 1``. ``err_t = [y_t not in C_t]``.

**ACI** (Gibbs & Candes 2021, "Adaptive conformal inference under distribution shift", NeurIPS,
eq. 2): ``alpha_{t+1} = alpha_t + gamma (alpha - err_t)``, ``alpha_1 = alpha``. For any sequence
(no assumption on the data) ``|(1/T) sum_t err_t - alpha| <= (max(alpha_1, 1 - alpha_1) + gamma) / (gamma T)``
(their Proposition 4.1): the long-run miscoverage is ``alpha``.

**DtACI** (Gibbs & Candes 2024, "Conformal inference for online prediction with arbitrary distribution
shifts", JMLR 25(162), Algorithm 1): experts ``i = 1..m`` run ACI with steps ``gamma_i``; with
``beta_t = sup{b : y_t in C_t(b)}`` (here ``1 - c_t/(n + 1)``, ``c_t = #{S_j < s(x_t, y_t)}``) and the
pinball loss ``l(beta, theta) = alpha (beta - theta) - min(0, beta - theta)``, the weights follow
``wbar_i = w_i exp(-eta l(beta_t, alpha_t^i))``, ``w_i <- (1 - sigma) wbar_i + sigma sum_j wbar_j / m``,
and the served level is that of one expert drawn with probabilities ``w_i / sum_j w_j`` (the paper's
Algorithm 1; ``choice="draw"``, the uniform of step ``t`` from ``numpy.random.default_rng((seed, t))``, so
the state stays plain data), or their weighted average ``sum_i w_i alpha_t^i / sum_i w_i``
(``choice="mean"``). Only the draw carries the paper's long-run coverage bound: the miscoverage is not
linear in the level, and where the scores of the labels pile up at one end (a class swap puts many
labels at the bottom of the ranking) the average of levels covers more than the average expert.
Defaults as the paper: ``gammas = 0.001 * 2^(0..7)``,
``sigma = 1/(2I)``, ``eta = sqrt(3/I) sqrt((log(m I) + 2) / ((1 - alpha)^2 alpha^3 + alpha^2 (1 - alpha)^3))``
with ``I`` the interval length of its regret bound (``interval``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from .scores import SCORES, all_scores, checked_probabilities

DEFAULT_GAMMAS = tuple(0.001 * 2.0**i for i in range(8))
MAX_EXPERTS = 32


@dataclass
class OnlineRecord:
    """Per labelled row, the set served *before* its label was used: whether it held the label, its
    size, and the level ``alpha_t`` it was built at."""

    covered: np.ndarray
    set_size: np.ndarray
    alpha: np.ndarray


class _OnlineConformal(ABC):
    level: float  # the level the next set is served at: ``_start`` sets it, ``_step`` moves it

    def __init__(self, alpha: float, score: str, k_reg: int, lam: float):
        if not (isinstance(alpha, int | float) and 0 < alpha < 1):
            raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
        if score not in SCORES:
            raise ValueError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
        if isinstance(k_reg, bool) or not isinstance(k_reg, int) or k_reg < 0:
            raise ValueError(f"k_reg must be a non-negative integer, got {k_reg!r}")
        if not (isinstance(lam, int | float) and math.isfinite(lam) and lam >= 0):
            raise ValueError(f"lam must be a non-negative number, got {lam!r}")
        self.alpha, self.score, self.k_reg, self.lam = float(alpha), score, int(k_reg), float(lam)

    def fit(self, probs, labels):
        """Keep the sorted calibration scores of labelled rows; the level starts at ``alpha``."""
        p, y = checked_probabilities(probs, labels)
        self.n_classes_ = p.shape[1]
        self.calibration_scores_ = np.sort(self._scores(p)[np.arange(len(y)), y])
        self._start()
        return self

    def _scores(self, p: np.ndarray) -> np.ndarray:
        return all_scores(p, self.score, self.k_reg, self.lam)

    def threshold_at(self, level: float) -> float:
        """``Q(level)`` (see the module)."""
        if level >= 1:
            return -math.inf
        n = len(self.calibration_scores_)
        rank = math.ceil((n + 1) * (1 - level)) if level > 0 else n + 1
        return math.inf if rank > n else float(self.calibration_scores_[rank - 1])

    def predict_sets(self, probs) -> np.ndarray:
        """Boolean mask ``(n, k)`` of the sets at the current level."""
        p, _ = checked_probabilities(probs)
        self._check_classes(p)
        return self._scores(p) <= self.threshold_at(self.level)

    def _check_classes(self, p: np.ndarray) -> None:
        if not hasattr(self, "calibration_scores_"):
            raise ValueError("fit the online conformal predictor first")
        if p.shape[1] != self.n_classes_:
            raise ValueError(f"probabilities have {p.shape[1]} classes, the predictor {self.n_classes_}")

    def update(self, probs, labels) -> OnlineRecord:
        """For each labelled row in order: serve its set at the current level, then update on its label."""
        p, y = checked_probabilities(probs, labels)
        self._check_classes(p)
        scores = self._scores(p)
        label_scores = scores[np.arange(len(y)), y]
        below = np.searchsorted(self.calibration_scores_, label_scores, side="left")
        betas = 1.0 - below / (len(self.calibration_scores_) + 1.0)
        covered = np.empty(len(y), dtype=np.bool_)
        sizes = np.empty(len(y), dtype=np.int64)
        levels = np.empty(len(y))
        for t in range(len(y)):
            levels[t] = self.level
            q = self.threshold_at(self.level)
            covered[t] = label_scores[t] <= q
            sizes[t] = int(np.count_nonzero(scores[t] <= q))
            self._step(float(label_scores[t]), float(betas[t]))
        return OnlineRecord(covered, sizes, levels)

    @abstractmethod
    def _start(self) -> None:
        """Set the level (and any state) to where a fit starts it."""

    @abstractmethod
    def _step(self, label_score: float, beta: float) -> None:
        """Move the level after the label of one served row (its score and ``beta``)."""

    def _covered_at(self, level: float, label_score: float) -> bool:
        return label_score <= self.threshold_at(level)

    def _base_dict(self) -> dict:
        return {"alpha": self.alpha, "score": self.score, "k_reg": self.k_reg, "lam": self.lam,
                "n_classes": int(self.n_classes_), "calibration_scores": self.calibration_scores_.tolist()}

    def _load_base(self, data: dict) -> None:
        scores = np.asarray(data["calibration_scores"], dtype=np.float64)
        if scores.ndim != 1 or not len(scores) or not np.isfinite(scores).all() or (np.diff(scores) < 0).any():
            raise ValueError("stored calibration_scores must be a non-empty sorted list of finite numbers")
        self.calibration_scores_, self.n_classes_ = scores, int(data["n_classes"])


class AdaptiveConformal(_OnlineConformal):
    """ACI with step ``gamma`` (see the module)."""

    def __init__(self, alpha: float = 0.1, gamma: float = 0.005, score: str = "aps", k_reg: int = 0,
                 lam: float = 0.0):
        super().__init__(alpha, score, k_reg, lam)
        if not (isinstance(gamma, int | float) and 0 < gamma <= 1):
            raise ValueError(f"gamma must lie in (0, 1], got {gamma!r}")
        self.gamma = float(gamma)

    def _start(self) -> None:
        self.level = self.alpha

    def _step(self, label_score: float, beta: float) -> None:
        err = 0.0 if self._covered_at(self.level, label_score) else 1.0
        self.level += self.gamma * (self.alpha - err)

    def to_dict(self) -> dict:
        return {"method": "aci", **self._base_dict(), "gamma": self.gamma, "level": self.level}

    @classmethod
    def from_dict(cls, data: dict) -> AdaptiveConformal:
        out = cls(data["alpha"], data["gamma"], data["score"], data["k_reg"], data["lam"])
        out._load_base(data)
        out.level = float(data["level"])
        return out


class DtACI(_OnlineConformal):
    """DtACI: ACI experts with steps ``gammas`` under exponential weights (see the module)."""

    def __init__(self, alpha: float = 0.1, gammas=DEFAULT_GAMMAS, interval: int = 100, score: str = "aps",
                 k_reg: int = 0, lam: float = 0.0, eta: float | None = None, sigma: float | None = None,
                 choice: str = "draw", seed: int = 0):
        super().__init__(alpha, score, k_reg, lam)
        if choice not in ("draw", "mean"):
            raise ValueError(f"choice must be 'draw' or 'mean', got {choice!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self.choice, self.seed = choice, seed
        g = np.asarray(gammas, dtype=np.float64)
        if g.ndim != 1 or not 1 <= len(g) <= MAX_EXPERTS or not np.all((g > 0) & (g <= 1)):
            raise ValueError(f"gammas must be 1 to {MAX_EXPERTS} steps in (0, 1]")
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise ValueError(f"interval must be a positive integer, got {interval!r}")
        a, m = self.alpha, len(g)
        self.gammas, self.interval = g, interval
        self.sigma = 1.0 / (2 * interval) if sigma is None else float(sigma)
        self.eta = (math.sqrt(3.0 / interval) * math.sqrt((math.log(m * interval) + 2)
                    / ((1 - a) ** 2 * a**3 + a**2 * (1 - a) ** 3))) if eta is None else float(eta)
        if not (0 <= self.sigma <= 1 and self.eta > 0 and math.isfinite(self.eta)):
            raise ValueError("sigma must lie in [0, 1] and eta be a positive number")

    def _start(self) -> None:
        self.expert_levels = np.full(len(self.gammas), self.alpha)
        self.weights = np.full(len(self.gammas), 1.0 / len(self.gammas))
        self.steps = 0
        self.level = self._served_level()

    def _served_level(self) -> float:
        if self.choice == "mean":
            return float(self.weights @ self.expert_levels)
        u = np.random.default_rng((self.seed, self.steps)).random()
        index = min(int(np.searchsorted(np.cumsum(self.weights), u, side="right")), len(self.weights) - 1)
        return float(self.expert_levels[index])

    def _step(self, label_score: float, beta: float) -> None:
        difference = beta - self.expert_levels
        pinball = self.alpha * difference - np.minimum(0.0, difference)
        w = self.weights * np.exp(-self.eta * (pinball - pinball.min()))  # shift: a common factor
        w = (1.0 - self.sigma) * w + self.sigma * w.sum() / len(w)
        self.weights = w / w.sum()
        err = np.array([0.0 if self._covered_at(a, label_score) else 1.0 for a in self.expert_levels])
        self.expert_levels = self.expert_levels + self.gammas * (self.alpha - err)
        self.steps += 1
        self.level = self._served_level()

    def to_dict(self) -> dict:
        return {"method": "dtaci", **self._base_dict(), "gammas": self.gammas.tolist(), "interval": self.interval,
                "eta": self.eta, "sigma": self.sigma, "choice": self.choice, "seed": self.seed,
                "expert_levels": self.expert_levels.tolist(), "weights": self.weights.tolist(),
                "steps": self.steps, "level": self.level}

    @classmethod
    def from_dict(cls, data: dict) -> DtACI:
        out = cls(data["alpha"], data["gammas"], data["interval"], data["score"], data["k_reg"], data["lam"],
                  data["eta"], data["sigma"], data["choice"], data["seed"])
        out._load_base(data)
        levels, weights = (np.asarray(data[name], dtype=np.float64) for name in ("expert_levels", "weights"))
        if levels.shape != out.gammas.shape or weights.shape != out.gammas.shape or not (weights >= 0).all():
            raise ValueError("stored expert_levels and weights need one entry per gamma (weights >= 0)")
        out.expert_levels, out.weights, out.level = levels, weights / weights.sum(), float(data["level"])
        out.steps = int(data["steps"])
        return out
