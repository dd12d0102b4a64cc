"""Anytime-valid comparison of two calibrators on the same labelled rows: per-row losses and an
empirical-Bernstein confidence sequence on the mean of their paired difference, the difference
whose mean the comparison reports (nothing is clipped).

**Per-row losses** of probabilities ``p`` (``n x k``) and labels ``y``: the negative log-likelihood
``-log max(p_{i,y_i}, EPSILON)`` with ``EPSILON = 2**-52`` the probability floor of
``calibration.probability_floor`` (every calibrator's output is floored there, so this is the plain
``-log p_{i,y_i}`` of served probabilities; the mean is ``calibration.nll``), in
``[0, LOG_BOUND]``, ``LOG_BOUND = log(1/EPSILON) = 36.04``; and the Brier score
``sum_j (p_ij - [j = y_i])^2`` in ``[0, 2]`` (the mean is ``calibration.brier``, summed over
classes, not divided by ``k``).

**The paired difference** of row ``i`` is ``d_i = loss(challenger)_i - loss(champion)_i``, in
``[-B, B]`` exactly: ``B = LOG_BOUND`` for NLL, ``B = 2`` for Brier. Its mean ``Delta`` is negative
when the challenger is better. Rows are i.i.d. draws of the held-out stream (or, more generally,
``E[d_t | past]`` is the same ``Delta`` at every step). The NLL difference is not clipped: a verdict
about a clipped mean can have the other sign than the reported mean.

**The confidence sequence** is the predictable plug-in empirical-Bernstein CS of Waudby-Smith &
Ramdas (2023), "Estimating means of bounded random variables by betting", JRSS-B 86(1),
Theorem 2 and eqs. (13)-(15), on ``x_i = (d_i + B) / 2B`` in ``[0, 1]``:

    C_t = ( sum_i l_i x_i / sum_i l_i )  +-  ( log(2/alpha) + sum_i v_i psi(l_i) ) / sum_i l_i

with ``v_i = 4 (x_i - m_{i-1})^2``, ``psi(l) = (-log(1 - l) - l) / 4``, the predictable bets
``l_t = min( sqrt(2 log(2/alpha) / (s2_{t-1} t log(1 + t))), c )`` (``c = 1/2``), and the
running estimates ``m_t = (1/2 + sum_{i<=t} x_i) / (t + 1)`` and
``s2_t = (1/4 + sum_{i<=t} (x_i - m_i)^2) / (t + 1)`` (``m_0 = 1/2``, ``s2_0 = 1/4``). Then
``P(for all t >= 1: mean in C_t) >= 1 - alpha``: the bounds may be read after every row, and
a decision taken at any data-dependent time, without inflating the error (Ville's inequality on
the two betting supermartingales). The running intersection (largest lower bound, smallest upper
bound so far) keeps the guarantee and is what is returned.

**A verdict** at level ``alpha``: ``challenger_better`` when the upper bound of ``Delta`` is below
0 **and** the reported mean difference (challenger - champion) is below 0; ``champion_better``
when the lower bound is above 0 and the reported mean difference is above 0; else
``inconclusive``. The second condition makes the verdict agree with the means the comparison
shows, always (the CS's centre is a bet-weighted mean, and its running intersection may keep a
bound from an earlier row, so the CS alone does not imply it); it only removes verdicts, so the
probability that any verdict ever names the worse calibrator by its mean floored loss (or either,
when they are equally good) is still at most ``alpha``, however often the evidence is looked at.
"""

from __future__ import annotations

import math

import numpy as np

from .probability_floor import EPSILON, LOG_BOUND

VERDICTS = ("challenger_better", "champion_better", "inconclusive")


def _labelled_entries(probs, labels) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels).astype(np.int64, copy=False)
    if p.ndim != 2 or y.shape != (p.shape[0],):
        raise ValueError(f"probs must be (n, k) and labels (n,), got {p.shape} and {y.shape}")
    if not np.isfinite(p).all():
        raise ValueError("probs must be finite")
    if y.size and (y.min() < 0 or y.max() >= p.shape[1]):
        raise ValueError(f"labels must lie in [0, {p.shape[1]})")
    return p, y


def row_nll(probs, labels) -> np.ndarray:
    """``-log max(p_{i,y_i}, EPSILON)`` per row, in ``[0, LOG_BOUND]`` (a probability above 1 by
    rounding counts as 1)."""
    p, y = _labelled_entries(probs, labels)
    return -np.log(np.clip(p[np.arange(len(y)), y], EPSILON, 1.0))


def row_brier(probs, labels) -> np.ndarray:
    """``sum_j (p_ij - [j = y_i])^2`` per row, in ``[0, 2]``."""
    p, y = _labelled_entries(probs, labels)
    rows = np.arange(len(y))
    return np.einsum("ij,ij->i", p, p) - 2.0 * p[rows, y] + 1.0


def empirical_bernstein_cs(x, alpha: float = 0.05, max_bet: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """The running-intersection bounds ``(lower, upper)`` after each observation of the mean of
    ``x`` in ``[0, 1]`` (last axis: time; leading axes: independent streams), at level ``alpha``."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    if not 0 < max_bet < 1:
        raise ValueError(f"max_bet must lie in (0, 1), got {max_bet!r}")
    x = np.asarray(x, dtype=np.float64)
    if x.shape[-1] == 0:
        raise ValueError("no observations")
    if np.isnan(x).any() or x.min() < 0 or x.max() > 1:
        raise ValueError("x must lie in [0, 1]")
    t = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
    mean = (0.5 + np.cumsum(x, axis=-1)) / (t + 1)
    variance = (0.25 + np.cumsum((x - mean) ** 2, axis=-1)) / (t + 1)
    start = np.ones((*x.shape[:-1], 1))
    mean_before = np.concatenate([0.5 * start, mean[..., :-1]], axis=-1)
    variance_before = np.concatenate([0.25 * start, variance[..., :-1]], axis=-1)
    log_term = math.log(2.0 / alpha)
    bets = np.minimum(np.sqrt(2.0 * log_term / (variance_before * t * np.log1p(t))), max_bet)
    psi = (-np.log1p(-bets) - bets) / 4.0
    bet_sum = np.cumsum(bets, axis=-1)
    centre = np.cumsum(bets * x, axis=-1) / bet_sum
    radius = (log_term + np.cumsum(4.0 * (x - mean_before) ** 2 * psi, axis=-1)) / bet_sum
    lower = np.maximum.accumulate(np.clip(centre - radius, 0.0, 1.0), axis=-1)
    upper = np.minimum.accumulate(np.clip(centre + radius, 0.0, 1.0), axis=-1)
    return lower, upper


def difference_cs(differences, bound: float, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Confidence sequence of the mean of ``differences``, each in ``[-bound, bound]`` (see the
    module; a difference outside, beyond rounding, is a ``ValueError``, never clipped)."""
    if not bound > 0:
        raise ValueError(f"bound must be positive, got {bound!r}")
    d = np.asarray(differences, dtype=np.float64)
    if d.size and not np.abs(d).max() <= bound * (1.0 + 1e-12):
        raise ValueError(f"differences must lie in [-{bound}, {bound}]")
    x = np.clip((d + bound) / (2.0 * bound), 0.0, 1.0)  # clip: rounding (of the losses, of this map) only
    lower, upper = empirical_bernstein_cs(x, alpha)
    return 2.0 * bound * lower - bound, 2.0 * bound * upper - bound


def verdict(lower: float, upper: float, mean: float) -> str:
    """The verdict on ``Delta = challenger - champion`` (lower is better) from its bounds and the
    reported mean difference ``mean`` (a verdict needs both to agree; see the module)."""
    if upper < 0 and mean < 0:
        return "challenger_better"
    if lower > 0 and mean > 0:
        return "champion_better"
    return "inconclusive"


def first_crossing(upper: np.ndarray) -> np.ndarray:
    """Per stream (leading axes), the number of rows after which the upper bound first fell below
    0 (the challenger was found better), or 0 if it never did."""
    below = np.asarray(upper) < 0
    first = np.argmax(below, axis=-1) + 1
    return np.where(below.any(axis=-1), first, 0)


def compare_losses(challenger_probs, champion_probs, labels, alpha: float = 0.05,
                   decide_on: str = "nll") -> dict:
    """The paired comparison of two calibrators' probabilities on the same labelled rows: mean
    NLL and Brier of each, the mean difference (challenger - champion) with its confidence
    sequence's bounds after the last row and the bound ``B`` of each row's difference, and the
    verdict on ``decide_on`` (``nll`` or ``brier``), which agrees with the reported means."""
    if decide_on not in ("nll", "brier"):
        raise ValueError(f"decide_on must be 'nll' or 'brier', got {decide_on!r}")
    out = {}
    for name, loss, bound in (("nll", row_nll, LOG_BOUND), ("brier", row_brier, 2.0)):
        challenger, champion = loss(challenger_probs, labels), loss(champion_probs, labels)
        difference = challenger - champion
        lower, upper = difference_cs(difference, bound, alpha)
        mean_challenger, mean_champion = float(challenger.mean()), float(champion.mean())
        mean = mean_challenger - mean_champion  # < 0 exactly when the challenger's reported mean is lower
        out[name] = {"challenger": mean_challenger, "champion": mean_champion, "difference": mean, "bound": bound,
                     "confidence_sequence": [float(lower[-1]), float(upper[-1])],
                     "verdict": verdict(float(lower[-1]), float(upper[-1]), mean)}
    return {**out, "alpha": alpha, "n_rows": len(labels), "decided_on": decide_on,
            "verdict": out[decide_on]["verdict"]}
