"""Numerical pieces shared by the affine-softmax calibrators of ``linear`` (vector, matrix and
Dirichlet scaling): standardised coordinates, a softmax with an NLL accurate near 0, and the
check that a fit has a finite optimum (see ``linear``'s docstring for the methods, formulas and
papers)."""

from __future__ import annotations

import numpy as np

from ..base import FitDiagnostics
from ..solvers import keeps_receding


def standardisation(x: np.ndarray, blocks=None) -> tuple[np.ndarray, np.ndarray]:
    """Column means and standard deviations of the features (a constant column gets scale 1).
    With ``blocks`` (slices of rows, in order) the squared deviations are summed a block at a
    time (``column_sums``), not held for all rows: the values of ``x.mean(axis=0)`` and
    ``x.std(axis=0)`` to the bit; float32 ``x`` is widened a block at a time, giving the values
    of its float64 copy."""
    if blocks is None:
        centre = x.mean(axis=0)
        scale = x.std(axis=0)
    else:
        n = len(x)
        centre = column_sums(x, blocks, lambda rows: rows.astype(np.float64, copy=False)) / n
        scale = np.sqrt(column_sums(x, blocks, lambda rows: np.square(rows - centre)) / n)
    scale[scale == 0] = 1.0
    return centre, scale


def column_sums(x: np.ndarray, blocks, transform=None) -> np.ndarray:
    """``transform(x).sum(axis=0)`` a block of rows at a time, to the bit: numpy sums a C-ordered
    array over its rows one row after another into the running total, so each block's sum starts
    from the total so far (a row ahead of the block) instead of from zero."""
    total: np.ndarray | None = None
    for block in blocks:
        rows = x[block] if transform is None else transform(x[block])
        total = np.add.reduce(rows if total is None else np.concatenate([total[None], rows]), axis=0)
    if total is None:
        raise ValueError("column sums need at least one block of rows")
    return total


def softmax_and_nll(out: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, float]:
    """``softmax(out)`` and the mean NLL of the labels, with ``log Σ exp`` taken as
    ``max + log1p(Σ of the other terms)`` so that a loss near 0 keeps its relative precision
    (the trust-region solver compares predicted and actual decreases of it). Overwrites ``out``."""
    rows = np.arange(len(out))
    top = out.argmax(axis=1)
    out -= out[rows, top][:, None]
    e = np.exp(out)
    e[rows, top] = 0.0
    rest = e.sum(axis=1)
    e[rows, top] = 1.0
    return e / (1.0 + rest)[:, None], float(np.mean(np.log1p(rest) - out[rows, labels]))


def check_finite_optimum(diagnostics: FitDiagnostics, objective, hessp, logits, theta, labels,
                         free_logits=None, blocks=None) -> FitDiagnostics:
    """The diagnostics, marked not converged when the objective has no finite minimiser
    (``keeps_receding``: Newton steps from the solution keep moving the logits and lowering
    the loss, along a direction certified to raise no label's margin). ``logits(v)`` is the
    change of the logits along the parameter direction ``v``; ``free_logits(v)`` that of its
    unpenalised part (a penalised component makes the loss grow quadratically along ``v``).
    Only a fit that met its gradient tolerance, or whose loss is below 1e-9, is checked. The
    fitted parameters' own unpenalised part is tried first as the direction: if it raises no
    label margin while raising one, the loss falls for ever along it (the penalty does not
    change), so no finite minimiser exists. With ``blocks`` (slices of rows) ``logits(v, block)``
    and ``free_logits(v, block)`` give a block's rows, and the extremes are taken block by block
    (the same values, without an n x k change and its margins)."""
    parts = [slice(None)] if blocks is None else blocks

    def changes(function, v: np.ndarray):
        for block in parts:
            yield block, function(v) if blocks is None else function(v, block)

    def spread(step: np.ndarray) -> float:
        return float(np.max([np.max(change.max(axis=1) - change.min(axis=1)) for _, change in changes(logits, step)]))

    def certify(direction: np.ndarray) -> bool:
        """No label margin ``Δz_y - Δz_j`` falls (to 1e-6 of the largest rise) and one rises."""
        largest, smallest = [], []
        for block, change in changes(free_logits or logits, direction):
            y = labels[block]
            margins = change[np.arange(len(y)), y][:, None] - change
            margins[np.arange(len(y)), y] = 0.0
            largest.append(margins.max())
            smallest.append(margins.min())
        top = float(np.max(largest))
        return top > 0 and float(np.min(smallest)) >= -1e-6 * top

    if not (diagnostics.converged or (diagnostics.objective or np.inf) <= 1e-9):
        return diagnostics
    # the fit's own unpenalised part may already be a certified direction (a solver that
    # followed the ray far enough, where the Newton steps of keeps_receding drown in rounding)
    if not (certify(theta) or keeps_receding(objective, hessp, spread, theta, certify=certify)):
        return diagnostics
    diagnostics.converged = False
    diagnostics.message = (
        "no finite optimum exists: this map separates some labels perfectly (or a class never "
        "occurs among them), so the NLL keeps falling towards its infimum as the weights grow "
        "without bound (Newton steps keep moving the logits); the parameters returned (weight "
        f"norm {np.linalg.norm(theta):.3g}) are where "
        f"the solver stopped ({diagnostics.message}); fit on more data or use fewer parameters "
        "(e.g. temperature scaling)")
    return diagnostics

