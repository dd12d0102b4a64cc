"""Deciding whether, and how far, to adjust calibrated probabilities to estimated target priors.

**Calibration for the estimate: bias-corrected temperature scaling** (BCTS; Alexandari, Kundaje &
Shrikumar 2020, "Maximum likelihood with bias-corrected calibration is hard-to-beat at label shift
adaptation", ICML): ``p(y | x) = softmax(z / T + b)_y`` with the temperature ``T`` and class-wise
biases ``b`` fitted together by minimising the NLL on labelled source rows (``bcts_fit``; analytic
gradient, L-BFGS). Plain temperature scaling leaves per-class miscalibration that biases EM; at
the BCTS optimum the gradient in ``b`` vanishes, so the mean calibrated probability of each class on
the fitted rows *equals* its frequency there, the source priors EM needs.

**Evidence: a likelihood-ratio test** of no prior shift. With ``w_j = q_j / pi_j`` the unlabelled
target rows have the log-likelihood (up to a term free of ``q``; Saerens et al. 2002)

    L(q) = sum_i log sum_j w_j p_ij,

EM's estimate ``q_hat`` maximises it, and ``G = 2 (L(q_hat) - L(pi))`` is asymptotically
chi-square with ``k - 1`` degrees of freedom when ``q = pi`` (Wilks): the p-value ``P(chi2_{k-1} >= G)``.

**Shrinkage toward the source priors** (a positive-part James-Stein rule on that statistic):
the suggested priors are ``q_s = pi + s (q_hat - pi)`` with

    s = max(0, 1 - (k - 1) / G)          when the test rejects at ``alpha``, else s = 0,

``k - 1`` being the statistic's mean under no shift, so weak evidence (small ``n``, large ``k``)
keeps the source priors and strong evidence keeps EM's estimate; a class EM sent to 0 keeps at
least ``(1 - s) pi_j``. The probabilities served are then ``adjust_priors(p, pi, q_s)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .label_shift import em_priors
from .metrics._inputs import probabilities_and_labels


@dataclass(frozen=True)
class BiasCorrectedTemperature:
    """A fitted BCTS: ``softmax(z / temperature + biases)``."""

    temperature: float
    biases: np.ndarray
    converged: bool

    def predict_proba(self, logits) -> np.ndarray:
        from scipy.special import softmax  # imported on use: scipy.special would slow every start

        z = np.asarray(logits, dtype=np.float64)
        return softmax(z / self.temperature + self.biases, axis=1)


def bcts_fit(logits, labels, max_iter: int = 1000) -> BiasCorrectedTemperature:
    """Fit ``T`` and ``b`` by minimising ``mean_i [logsumexp(z_i / T + b) - z_iy / T - b_y]`` over
    ``(log T, b)`` with its analytic gradient (``b`` is defined up to a constant; it is returned
    with mean 0)."""
    from scipy.optimize import minimize
    from scipy.special import log_softmax

    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(labels).astype(np.int64, copy=False)
    if z.ndim != 2 or y.shape != (len(z),) or len(z) == 0:
        raise ValueError(f"logits must be (n, k) and labels (n,), got {z.shape} and {y.shape}")
    if not np.all(np.isfinite(z)):
        raise ValueError("logits must be finite")
    n, k = z.shape
    if y.min() < 0 or y.max() >= k:
        raise ValueError(f"labels must lie in [0, {k})")
    rows = np.arange(n)
    onehot = np.zeros((n, k))
    onehot[rows, y] = 1.0

    def loss(theta):
        scale, b = np.exp(theta[0]), theta[1:]
        log_p = log_softmax(z * scale + b, axis=1)
        residual = (np.exp(log_p) - onehot) / n
        return -log_p[rows, y].mean(), np.concatenate([[scale * (residual * z).sum()], residual.sum(axis=0)])

    # start at the counts' log frequencies (smoothed), temperature 1
    start = np.concatenate([[0.0], np.log((np.bincount(y, minlength=k) + 0.5) / (n + 0.5 * k))])
    result = minimize(loss, start, jac=True, method="L-BFGS-B",
                      options={"maxiter": max_iter, "gtol": 1e-10, "ftol": 1e-15})
    biases = result.x[1:] - result.x[1:].mean()
    return BiasCorrectedTemperature(float(np.exp(-result.x[0])), biases, bool(result.success))


@dataclass(frozen=True)
class PriorShift:
    """EM's estimate, the likelihood-ratio test of no shift, and the suggested (shrunk) priors."""

    source_priors: np.ndarray
    estimate: np.ndarray
    statistic: float
    degrees_of_freedom: int
    p_value: float
    alpha: float
    shrinkage: float
    suggested: np.ndarray
    iterations: int
    converged: bool

    @property
    def adjust(self) -> bool:
        """Whether the suggestion differs from the source priors."""
        return self.shrinkage > 0

    def to_dict(self) -> dict:
        return {"source_priors": self.source_priors.tolist(), "estimate": self.estimate.tolist(),
                "test": {"statistic": self.statistic, "degrees_of_freedom": self.degrees_of_freedom,
                         "p_value": self.p_value, "alpha": self.alpha, "method": "likelihood ratio (Wilks)"},
                "shrinkage": self.shrinkage, "suggested_priors": self.suggested.tolist(), "adjust": self.adjust,
                "iterations": self.iterations, "converged": self.converged}


def log_likelihood(probs: np.ndarray, source_priors: np.ndarray, priors: np.ndarray) -> float:
    """``sum_i log sum_j (q_j / pi_j) p_ij`` (rows whose every weight is 0 count as ``-inf``)."""
    weights = np.divide(priors, source_priors, out=np.zeros_like(priors), where=source_priors > 0)
    with np.errstate(divide="ignore"):
        return float(np.log(probs @ weights).sum())


def prior_shift(probs, source_priors, alpha: float = 0.05, tol: float = 1e-8, max_iter: int = 10_000) -> PriorShift:
    """The test, EM's estimate and the suggested priors of the module docstring, for target rows'
    probabilities ``probs`` calibrated for ``source_priors`` (BCTS outputs and the class frequencies
    of the rows it was fitted on)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    p, _ = probabilities_and_labels(probs, None)
    p = p / p.sum(axis=1, keepdims=True)
    em = em_priors(p, source_priors, tol=tol, max_iter=max_iter)
    pi = np.asarray(source_priors, dtype=np.float64)
    pi = pi / pi.sum()
    degrees = int((pi > 0).sum()) - 1
    statistic = max(0.0, 2.0 * (log_likelihood(p, pi, em.priors) - log_likelihood(p, pi, pi)))
    if not np.isfinite(statistic):
        statistic = 0.0  # a source prior of 0 the target rows need: no evidence this test can weigh
    from scipy.stats import chi2  # imported on use: scipy.stats would slow every start

    p_value = float(chi2.sf(statistic, degrees)) if degrees > 0 else 1.0
    shrinkage = max(0.0, 1.0 - degrees / statistic) if p_value < alpha and statistic > 0 else 0.0
    suggested = pi + shrinkage * (em.priors - pi)
    return PriorShift(pi, em.priors, statistic, max(degrees, 0), p_value, alpha, shrinkage,
                      suggested / suggested.sum(), em.iterations, em.converged)
