"""Label shift: estimating the class priors of an unlabelled target set and adapting calibrated
probabilities to them.

Under label shift ``p_t(x | y) = p_s(x | y)`` while the priors move from ``pi`` (source, where the
model and its calibrator were fitted) to ``q`` (target). Bayes' rule then gives the target
posterior from the calibrated source posterior (Saerens, Latinne & Decaestecker 2002, eq. 2.4):

    p_t(y | x) = (q_y / pi_y) p_s(y | x) / sum_j (q_j / pi_j) p_s(j | x)        (``adjust_priors``)

* ``em_priors`` — Saerens et al. (2002), "Adjusting the outputs of a classifier to new a priori
  probabilities: a simple procedure", Neural Computation 14(1): EM on the unlabelled target rows,
  ``q^(s+1)_y = mean_i p^(s)_t(y | x_i)`` with ``p^(s)_t`` the adjusted posterior above at
  ``q^(s)``; a fixed point is the maximum-likelihood prior. It needs *calibrated* posteriors
  (Alexandari, Kundaje & Shrikumar, ICML 2020: EM on bias-corrected temperature-scaled outputs
  beats BBSE and RLLS).
* ``bbse_priors`` — Lipton, Wang & Smola (2018), "Detecting and correcting for label shift with
  black box predictors", ICML: with the source confusion matrix ``C_ij = P_s(yhat = i, y = j)``
  and the target prediction rates ``mu_i = P_t(yhat = i)``, ``mu = C w`` for the weights
  ``w_j = q_j / pi_j``; ``w`` is solved by least squares, clipped at 0, and ``q = w * pi``
  renormalised. Needs labelled source rows, not calibration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .metrics._inputs import probabilities_and_labels


def _priors(priors, k: int, name: str) -> np.ndarray:
    q = np.asarray(priors, dtype=np.float64)
    if q.shape != (k,) or not np.all(np.isfinite(q)) or (q < 0).any() or q.sum() <= 0:
        raise ValueError(f"{name} must be {k} non-negative numbers with a positive sum")
    return q / q.sum()


def adjust_priors(probs, source_priors, target_priors) -> np.ndarray:
    """Posteriors re-weighted from ``source_priors`` to ``target_priors`` (rows sum to 1; a row
    whose every class got weight 0 keeps its source posterior)."""
    p, _ = probabilities_and_labels(probs, None)
    pi = _priors(source_priors, p.shape[1], "source_priors")
    q = _priors(target_priors, p.shape[1], "target_priors")
    weights = np.divide(q, pi, out=np.zeros_like(q), where=pi > 0)
    adjusted = p * weights
    total = adjusted.sum(axis=1, keepdims=True)
    return np.where(total > 0, adjusted / np.where(total > 0, total, 1.0), p)


@dataclass(frozen=True)
class PriorEstimate:
    priors: np.ndarray
    iterations: int
    converged: bool

    def to_dict(self) -> dict:
        return {"priors": self.priors.tolist(), "iterations": self.iterations, "converged": self.converged}


def em_priors(probs, source_priors=None, tol: float = 1e-8, max_iter: int = 10_000) -> PriorEstimate:
    """Saerens et al. (2002) EM estimate of the target priors from calibrated posteriors ``probs``;
    ``source_priors`` (required) are the priors they are calibrated for: the class frequencies of
    the rows a calibrator was fitted on, or the mean of its calibrated probabilities there (equal
    for bias-corrected temperature scaling, ``calibration.prior_shift.bcts_fit``). They cannot be
    derived from ``probs``: their mean is a fixed point of the update, so EM started there returns
    it after one iteration whatever the shift (a ``ValueError`` without them). Stops when no prior
    moves by more than ``tol``."""
    if source_priors is None:
        raise ValueError("em_priors needs source_priors: the priors the probabilities are calibrated for "
                         "(the mean of probs is a fixed point of EM, so it cannot stand in for them)")
    p, _ = probabilities_and_labels(probs, None)
    p = p / p.sum(axis=1, keepdims=True)
    k = p.shape[1]
    pi = _priors(source_priors, k, "source_priors")
    safe_pi = np.where(pi > 0, pi, 1.0)
    q = pi.copy()
    for iteration in range(1, max_iter + 1):
        weighted = p * np.where(pi > 0, q / safe_pi, 0.0)
        total = weighted.sum(axis=1, keepdims=True)
        posterior = np.divide(weighted, total, out=np.zeros_like(weighted), where=total > 0)
        new = posterior.mean(axis=0)
        new = new / new.sum()
        moved = np.abs(new - q).max()
        q = new
        if moved <= tol:
            return PriorEstimate(q, iteration, True)
    return PriorEstimate(q, max_iter, False)


def bbse_priors(source_probs, source_labels, target_probs, source_priors=None) -> PriorEstimate:
    """Lipton et al. (2018) black-box shift estimate (hard predictions) of the target priors from
    labelled source rows and unlabelled target rows of the same classifier (``source_priors``:
    default the source labels' class frequencies)."""
    p, y = probabilities_and_labels(source_probs, source_labels)
    t, _ = probabilities_and_labels(target_probs, None)
    k = p.shape[1]
    if t.shape[1] != k:
        raise ValueError(f"source has {k} classes but target has {t.shape[1]}")
    confusion = np.zeros((k, k))
    np.add.at(confusion, (p.argmax(axis=1), y), 1.0)
    confusion /= len(y)
    pi = (np.bincount(y, minlength=k) / len(y) if source_priors is None
          else _priors(source_priors, k, "source_priors"))
    rates = np.bincount(t.argmax(axis=1), minlength=k) / len(t)
    weights, *_ = np.linalg.lstsq(confusion, rates, rcond=None)
    q = np.clip(weights, 0.0, None) * pi
    q = q / q.sum() if q.sum() > 0 else pi.copy()
    return PriorEstimate(q, 1, True)
