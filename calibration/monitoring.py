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

**Class frequencies** (optional, ``n_classes``): the same game on the one-vs-rest residuals
``r_tj = p_tj - [y_t = j]`` (each in ``[-1, 1]``) with the null ``|E[r_tj | past]| <= eps_c`` for every
class ``j`` — the calibrated probabilities of each class average to its frequency, which a label
(prior) shift breaks. The bet is a vector, ``K'_t = K'_{t-1} (1 + sum_j lambda_tj r_tj - eps_c
sum_j |lambda_tj|)`` with the per-class plug-in bets above rescaled so that ``sum_j |lambda_tj| <= c``,
again a supermartingale under its null. The alarm then watches the average ``(K_t + K'_t) / 2``:
an average of e-processes is an e-process, so ``alpha`` holds for the two nulls together.

**Without labels** (``label_free_residuals``) the same games run on ``max_j p_tj - c0`` and
``p_tj - m_j``, where ``c0`` and ``m`` are the mean top-label confidence and the mean probabilities
of a fixed reference set: the null is then "the stream's expected accuracy and mean class
probabilities stay within the tolerances of the reference's" (covariate or label shift moves
them). With a reference *estimated* from ``n_ref`` rows the tolerances must also cover its own
sampling error: ``calibration.label_free`` widens them by the reference's confidence bounds at a
split alpha, so that alpha holds for any ``n_ref``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .metrics._inputs import probabilities_and_labels, top_label_of

STATE_FIELDS = ("n", "mean", "second", "top_log_wealth", "class_mean", "class_second", "class_log_wealth",
                "log_wealth", "max_log_wealth", "alarm_at")
SHORT = 32  # rows up to which an update runs its exponential means as a loop
OPTIONS = ("alpha", "tolerance", "half_life", "max_bet", "n_classes", "class_tolerance")


def top_label_residuals(probs, labels) -> np.ndarray:
    """``max_j p_ij - [argmax_j p_ij = y_i]`` per row, in ``[-1, 1]`` (float64, on the host)."""
    confidence, correct = top_label_of(probs, labels)
    return np.asarray(confidence, dtype=np.float64) - np.asarray(correct, dtype=np.float64)


def class_residuals(probs, labels) -> np.ndarray:
    """``p_ij - [y_i = j]`` per row and class (float64, on the host)."""
    p, y = probabilities_and_labels(probs, labels)
    out = p.copy()
    out[np.arange(len(y)), y] -= 1.0
    return out


def label_free_residuals(probs, reference_confidence: float, reference_mean) -> tuple[np.ndarray, np.ndarray]:
    """Residuals of unlabelled rows against a reference (e.g. the labelled data a calibrator was
    checked on): ``max_j p_ij - c0`` (the expected accuracy's drift) and ``p_ij - m_j`` (the drift
    of the mean probability of each class), both in ``[-1, 1]``, for ``DriftTest.update``."""
    p, _ = probabilities_and_labels(probs, None)
    mean = np.asarray(reference_mean, dtype=np.float64)
    if mean.shape != (p.shape[1],) or not 0 <= reference_confidence <= 1:
        raise ValueError(f"the reference needs a confidence in [0, 1] and {p.shape[1]} class means")
    return p.max(axis=1) - reference_confidence, p - mean


def _ewma(values: np.ndarray, start: np.ndarray, keep: float, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """The exponentially weighted mean ``m_t = keep m_{t-1} + (1 - keep) x_t`` from ``m_0 = start``
    along ``axis`` (a first-order linear filter): its values *before* each step (what a bet may
    use), and after the last step."""
    steps = values.shape[axis]
    if steps <= SHORT:  # many short signals (many streams at once): lfilter's per-signal cost dominates
        rows = np.moveaxis(values, axis, 0)
        before, mean = np.empty_like(rows), start
        for t in range(steps):
            before[t] = mean
            mean = keep * mean + (1.0 - keep) * rows[t]
        return np.moveaxis(before, 0, axis), mean
    from scipy.signal import lfilter  # imported on use: it and the scipy.stats it loads slow every start

    after = lfilter([1.0 - keep], [1.0, -keep], values, axis=axis, zi=np.expand_dims(keep * start, axis))[0]
    before = np.concatenate([np.expand_dims(start, axis), np.delete(after, -1, axis=axis)], axis=axis)
    return before, np.take(after, -1, axis=axis)


def _plug_in(mean: np.ndarray, second: np.ndarray, tolerance: float | np.ndarray) -> np.ndarray:
    excess = np.sign(mean) * np.maximum(np.abs(mean) - tolerance, 0.0)
    return excess / np.maximum(second, 1e-12)


@dataclass
class DriftTest:
    """The betting e-process above, for one stream or for ``shape`` independent streams at once
    (every state array has that shape; ``update`` takes residuals of shape ``shape + (t,)`` and,
    with ``n_classes``, class residuals of shape ``shape + (t, n_classes)``).

    ``alpha``: the false-alarm probability over the whole (unbounded) stream; ``tolerance``:
    ``eps``, the drift of ``mean_confidence - accuracy`` that is not an alarm; ``half_life``: rows
    after which an old residual weighs half in the bet; ``max_bet``: ``c``; ``n_classes`` and
    ``class_tolerance`` (``eps_c``, one number or one per class ``eps_cj``, the pay-off then
    ``sum_j lambda_tj r_tj - sum_j |lambda_tj| eps_cj``): the class-frequency game, off without
    ``n_classes``.
    """

    alpha: float = 0.01
    tolerance: float = 0.02
    half_life: float = 1000.0
    max_bet: float = 0.5
    shape: tuple = ()
    n_classes: int | None = None
    class_tolerance: float | np.ndarray = 0.02  # one number, or one per class

    def __post_init__(self):
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must lie in (0, 1), got {self.alpha!r}")
        if np.ndim(self.class_tolerance):  # one tolerance per class
            self.class_tolerance = np.asarray(self.class_tolerance, dtype=np.float64)
            if self.n_classes is None or self.class_tolerance.shape != (int(self.n_classes),):
                raise ValueError("class_tolerance must be a number or one number per class (n_classes)")
        for name in ("tolerance", "class_tolerance"):
            value = np.asarray(getattr(self, name))
            if not np.all((value >= 0) & (value < 1)):
                raise ValueError(f"{name} must lie in [0, 1), got {getattr(self, name)!r}")
        if not self.half_life > 0:
            raise ValueError(f"half_life must be positive, got {self.half_life!r}")
        if not 0 < self.max_bet < 1 / (1 + max(self.tolerance, float(np.max(self.class_tolerance)))):
            raise ValueError(f"max_bet must lie in (0, 1/(1 + tolerance)), got {self.max_bet!r}")
        if self.n_classes is not None and (isinstance(self.n_classes, bool) or int(self.n_classes) < 2):
            raise ValueError(f"n_classes must be at least 2, got {self.n_classes!r}")
        self.shape = tuple(self.shape)
        k = (int(self.n_classes),) if self.n_classes else (0,)
        self.n = np.zeros(self.shape, dtype=np.int64)
        self.mean, self.second = np.zeros(self.shape), np.full(self.shape, 0.25)
        self.class_mean, self.class_second = np.zeros(self.shape + k), np.full(self.shape + k, 0.25)
        self.top_log_wealth, self.class_log_wealth = np.zeros(self.shape), np.zeros(self.shape)
        self.log_wealth, self.max_log_wealth = np.zeros(self.shape), np.zeros(self.shape)
        self.alarm_at = np.full(self.shape, -1, dtype=np.int64)  # rows seen when the e-value first reached 1/alpha

    @property
    def threshold(self) -> float:
        """``log(1/alpha)``: the log e-value at which the test alarms."""
        return math.log(1 / self.alpha)

    @property
    def alarmed(self) -> np.ndarray:
        return self.alarm_at >= 0

    @property
    def e_value(self) -> np.ndarray:
        return np.exp(self.log_wealth)

    def bet(self) -> np.ndarray:
        """``lambda_t`` of the top-label game, from the past only."""
        return np.clip(_plug_in(self.mean, self.second, self.tolerance), -self.max_bet, self.max_bet)

    def class_bet(self) -> np.ndarray:
        """The class-frequency game's vector bet, from the past only (``sum_j |lambda_j| <= c``)."""
        raw = _plug_in(self.class_mean, self.class_second, self.class_tolerance)
        total = np.abs(raw).sum(axis=-1, keepdims=True)
        return raw * np.minimum(1.0, self.max_bet / np.maximum(total, 1e-300))

    def update(self, residuals, class_residuals=None) -> DriftTest:
        """Feed residuals (``shape + (t,)``, each in ``[-1, 1]``) and, with ``n_classes``, the class
        residuals (``shape + (t, n_classes)``), oldest first."""
        r = _checked(residuals, self.shape, (), "residuals")
        c = None
        if self.n_classes:
            if class_residuals is None:
                raise ValueError("this test watches class frequencies: pass class_residuals")
            c = _checked(class_residuals, self.shape, (int(self.n_classes),), "class_residuals")
            if c.shape[len(self.shape)] != r.shape[-1]:
                raise ValueError("residuals and class_residuals must have as many rows")
        if r.shape[-1] == 0:
            return self
        keep = 2.0 ** (-1.0 / self.half_life)
        mean, self.mean = _ewma(r, self.mean, keep, -1)
        second, self.second = _ewma(r * r, self.second, keep, -1)
        stake = np.clip(_plug_in(mean, second, self.tolerance), -self.max_bet, self.max_bet)
        path = self.top_log_wealth[..., None] + np.cumsum(np.log1p(stake * r - np.abs(stake) * self.tolerance),
                                                         axis=-1)
        self.top_log_wealth = path[..., -1].copy()
        if c is not None:
            class_mean, self.class_mean = _ewma(c, self.class_mean, keep, -2)
            class_second, self.class_second = _ewma(c * c, self.class_second, keep, -2)
            raw = _plug_in(class_mean, class_second, self.class_tolerance)
            total = np.abs(raw).sum(axis=-1, keepdims=True)
            stakes = raw * np.minimum(1.0, self.max_bet / np.maximum(total, 1e-300))
            gain = (stakes * c).sum(axis=-1) - (np.abs(stakes) * self.class_tolerance).sum(axis=-1)
            class_path = self.class_log_wealth[..., None] + np.cumsum(np.log1p(gain), axis=-1)
            self.class_log_wealth = class_path[..., -1].copy()
            path = np.logaddexp(path, class_path) - math.log(2)
        crossed = path >= self.threshold
        first = np.argmax(crossed, axis=-1)
        self.alarm_at = np.where((self.alarm_at < 0) & crossed.any(axis=-1), self.n + first + 1, self.alarm_at)
        self.max_log_wealth = np.maximum(self.max_log_wealth, path.max(axis=-1))
        self.log_wealth = path[..., -1].copy()
        self.trajectory = path  # the log e-value after each row of this update (shape + (t,))
        self.n = self.n + r.shape[-1]
        return self

    def to_dict(self) -> dict:
        """The options and the state of a single stream, as plain numbers and lists (JSON-safe)."""
        if self.shape:
            raise ValueError("to_dict serialises a single stream (shape ())")
        return {**{name: np.asarray(getattr(self, name)).tolist() for name in OPTIONS},
                **{name: getattr(self, name).tolist() for name in STATE_FIELDS}}

    @classmethod
    def from_dict(cls, data: dict) -> DriftTest:
        test = cls(**{name: data[name] for name in OPTIONS})
        for name in STATE_FIELDS:
            setattr(test, name, np.asarray(data[name], dtype=getattr(test, name).dtype))
        return test


def _checked(values, leading: tuple, trailing: tuple, name: str) -> np.ndarray:
    """``values`` as float64 of shape ``leading + (t,) + trailing``, each in ``[-1, 1]``."""
    array = np.asarray(values, dtype=np.float64)
    n = len(leading)
    if array.ndim != n + 1 + len(trailing) or array.shape[:n] != leading or array.shape[n + 1:] != trailing:
        raise ValueError(f"{name} must have shape {leading} + (t,) + {trailing}, got {array.shape}")
    if array.size and (not np.all(np.isfinite(array)) or np.abs(array).max() > 1):
        raise ValueError(f"{name} must be finite and lie in [-1, 1]")
    return array


def drift_test(probs, labels, alpha: float = 0.01, tolerance: float = 0.02, half_life: float = 1000.0,
               max_bet: float = 0.5, class_tolerance: float | None = 0.02) -> DriftTest:
    """The e-process of one labelled stream (rows in arrival order), run to its end; it watches the
    class frequencies too unless ``class_tolerance`` is None."""
    if class_tolerance is None:
        return DriftTest(alpha, tolerance, half_life, max_bet).update(top_label_residuals(probs, labels))
    cr = class_residuals(probs, labels)
    test = DriftTest(alpha, tolerance, half_life, max_bet, n_classes=cr.shape[1], class_tolerance=class_tolerance)
    return test.update(top_label_residuals(probs, labels), cr)
