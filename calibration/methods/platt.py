"""Platt scaling (Platt, "Probabilistic outputs for support vector machines", 1999).

Binary (k = 2, including binary ``scores``): ``P(y = 1 | s) = σ(a s + b)`` with ``s`` the
log-odds ``z_1 - z_0``. ``a, b`` minimise the cross-entropy against Platt's smoothed targets
``t+ = (N+ + 1)/(N+ + 2)`` for positives and ``t- = 1/(N- + 2)`` for negatives, which keeps
the optimum finite on separable data. Both classes must occur in the labels.

k > 2: one-vs-rest. For each class j the score is its log-odds
``s_j = log p_j - log(1 - p_j)`` (p = softmax(z); computed without cancellation), a pair
``(a_j, b_j)`` is fitted as above on ``[y = j]``, and the outputs ``σ(a_j s_j + b_j)`` are
divided by their row sum. Not accuracy-preserving.

Separable data. The smoothed targets lie strictly inside (0, 1), so each pair's loss grows
without bound in every direction that moves some ``a s + b``: a finite minimiser always exists,
also when the scores separate the labels perfectly (then it is the regularised optimum that the
targets define, with ``|a s + b|`` of order ``log N``), and it is unique unless the scores are
all equal (then only ``a s + b`` is determined, and is returned with ``a = 1``).

Fit: each pair is fitted in standardised scores ``s̃ = (s - m) / σ`` (``f = ã s̃ + b̃``;
``a = ã / σ``, ``b = b̃ - a m``), all pairs together by L-BFGS-B with the analytic gradient,
from ``a = 1, b = 0`` (``ã = σ``; ``ã = 4`` where σ > 4, which would saturate the sigmoid
on large scores). It reports convergence when every gradient entry (mean loss, standardised
coordinates) is at most 1e-6. In raw coordinates the gradient in ``a`` scales with the scores:
with scores of size 1e-10 the fit met its gradient test at once at ``a = 1``, 1e10 away from
the optimum, and with scores of size 1e8 it stopped short.

Backends: prediction (log-odds, affine map, sigmoid) runs on the input's device; the fit runs
on a float64 host copy.
"""

from __future__ import annotations

import math

import numpy as np

from ..backend import device, namespace
from ..base import Calibrator, FitDiagnostics, normalise_rows, on_device, param_array
from ..inputs import InputBatch
from ..softmax import log_softmax
from ..solvers import minimize_smooth


def class_log_odds(logits: np.ndarray) -> np.ndarray:
    """``log p_j - log(1 - p_j)`` for every entry of ``softmax(logits)``, accurately also
    where ``p_j`` is close to 1 (the top entry: its complement is summed directly)."""
    xp = namespace(logits)
    k = logits.shape[1]
    if k == 2:
        s = logits[:, 1] - logits[:, 0]
        return xp.stack([-s, s], axis=1)
    log_p = log_softmax(logits)
    with np.errstate(divide="ignore"):  # the top entry may have p = 1; it is replaced below
        log_rest = xp.log1p(-xp.exp(log_p))
    top = xp.argmax(log_p, axis=1)
    is_top = xp.arange(k, device=device(logits))[None, :] == top[:, None]
    others = xp.where(is_top, xp.full_like(logits, -math.inf), logits)
    m = xp.max(logits, axis=1)
    lse_all = m + xp.log(xp.sum(xp.exp(logits - m[:, None]), axis=1))
    m_others = xp.max(others, axis=1)
    lse_others = m_others + xp.log(xp.sum(xp.exp(others - m_others[:, None]), axis=1))
    log_rest = xp.where(is_top, (lse_others - lse_all)[:, None], log_rest)
    return log_p - log_rest


def sigmoid(x):
    """``1 / (1 + exp(-x))`` without overflow: ``exp(-|x|)`` in both branches."""
    xp = namespace(x)
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


class PlattScaling(Calibrator):
    """Platt scaling, binary or one-vs-rest; see the module docstring."""

    method = "platt"
    description = (
        "Platt scaling (Platt 1999): sigmoid(a*s + b) on the log-odds with smoothed targets; "
        "one-vs-rest and renormalised for k > 2."
    )

    def _scores(self, scores: InputBatch) -> np.ndarray:
        s = class_log_odds(scores.logits)
        return s[:, 1:] if scores.k == 2 else s

    def _fit(self, scores: InputBatch, labels: np.ndarray) -> FitDiagnostics:
        s = self._scores(scores)
        n, m = s.shape
        if scores.k == 2:
            positive = (labels == 1)[:, None].astype(np.float64)
            if positive.all() or not positive.any():
                raise ValueError(
                    f"platt needs samples of both classes; all labels are {int(labels[0])}"
                )
        else:
            positive = np.zeros((n, m))
            positive[np.arange(n), labels] = 1.0
        n_pos = positive.sum(axis=0)
        target = np.where(positive > 0, (n_pos + 1) / (n_pos + 2), 1 / (n - n_pos + 2))

        centre = s.mean(axis=0)
        scale = s.std(axis=0)
        scale[scale == 0] = 1.0
        x = (s - centre) / scale

        def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
            a, b = theta[:m], theta[m:]
            f = a * x + b
            loss = float(np.sum(np.mean(np.logaddexp(0.0, f) - target * f, axis=0)))
            residual = (sigmoid(f) - target) / n
            return loss, np.concatenate([np.einsum("ij,ij->j", residual, x), residual.sum(axis=0)])

        start = np.concatenate([np.minimum(scale, 4.0), np.zeros(m)])
        theta, diagnostics = minimize_smooth(objective, start)
        self.slope_ = theta[:m] / scale
        self.intercept_ = theta[m:] - self.slope_ * centre
        return diagnostics

    def _predict(self, scores: InputBatch) -> np.ndarray:
        f = on_device(self.slope_, scores) * self._scores(scores) + on_device(self.intercept_, scores)
        if scores.k == 2:
            return scores.xp.stack([sigmoid(-f[:, 0]), sigmoid(f[:, 0])], axis=1)
        return normalise_rows(sigmoid(f))

    def _params(self) -> dict:
        return {"slope": self.slope_.tolist(), "intercept": self.intercept_.tolist()}

    def _set_params(self, params: dict) -> None:
        m = 1 if self.n_classes_ == 2 else self.n_classes_
        self.slope_ = param_array(params, "slope", (m,))
        self.intercept_ = param_array(params, "intercept", (m,))
