"""Choosing a calibration method from a cross-validated comparison (``calibration.comparison``)
by a stated rule.

``select`` applies the rule: among candidates that pass the constraints (accuracy-preserving
maps only when ``preserve_accuracy``; every fold's fit converged; cross-validated NLL finite
and below the uncalibrated NLL), take the lowest mean NLL. A candidate counts as tied with that best when its mean
paired per-fold NLL difference is both within one standard error (the folds cannot tell them
apart) and below ``TIE_TOLERANCE`` = 0.25% of the best NLL (the difference does not matter in
practice: on the sets in ``shared/data`` cross-validated gaps of 0.5% became test-set gaps of
1-2%, so a wider band would trade real NLL for the guideline). A tie goes to
the candidate that comes first in the Mix-n-Match guideline order (Zhang, Kailkhura & Han,
"Mix-n-Match: Ensemble and Compositional Methods for Uncertainty Calibration in Deep
Learning", ICML 2020, §5): data-efficient parametric maps (ETS, TS, EC) first; then IRM (for
when the parametric form is wrong); then IROvA-TS, which goes first instead when there is
much data (at least ``MUCH_DATA_PER_CLASS`` validation samples per class) and no accuracy
constraint; then the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .comparison import Candidate, Comparison, MethodResult

MUCH_DATA_PER_CLASS = 500
TIE_TOLERANCE = 0.0025

GUIDELINE_ORDER = (
    "ensemble_temperature",
    "temperature",
    "expectation_consistency",
    "isotonic_multiclass",
    "irova_ts",
    "vector",
    "dirichlet",
    "matrix",
    "platt",
    "isotonic_one_vs_all",
)


@dataclass
class Selection:
    """The chosen candidate, the rule's verdict on every candidate, and why, in words."""

    chosen: Candidate
    reason: str
    tied: list[str]
    excluded: dict[str, str]

    def to_dict(self) -> dict:
        return {"chosen": self.chosen.to_dict(), "reason": self.reason, "tied": self.tied,
                "excluded": self.excluded}


def guideline_order(n: int, k: int, preserve_accuracy: bool) -> list[str]:
    """The tie-break order (module docstring): IROvA-TS first with much data and no accuracy constraint."""
    order = list(GUIDELINE_ORDER)
    if not preserve_accuracy and n >= MUCH_DATA_PER_CLASS * k:
        order.remove("irova_ts")
        order.insert(0, "irova_ts")
    return order


def select(comparison: Comparison, preserve_accuracy: bool = False) -> Selection:
    """Apply the selection rule of the module docstring to a ``Comparison``."""
    baseline = float(np.mean(comparison.uncalibrated["nll"]))
    excluded: dict[str, str] = {}
    eligible = []
    for result in comparison.results:
        name, value = result.candidate.name, result.mean("nll")
        if result.error is not None:
            excluded[name] = f"failed: {result.error}"
        elif preserve_accuracy and not result.accuracy_preserving:
            excluded[name] = "not accuracy-preserving"
        elif not result.converged:
            excluded[name] = "its solver did not converge in every fold"
        elif not math.isfinite(value):
            excluded[name] = "cross-validated NLL is infinite (a held-out label got probability 0)"
        elif not value < baseline:
            excluded[name] = f"cross-validated NLL {value:.6g} is not below the uncalibrated {baseline:.6g}"
        else:
            eligible.append(result)
    if not eligible:
        raise ValueError(f"no candidate passes the constraints: {excluded}")
    best = min(eligible, key=lambda r: r.mean("nll"))
    tied = []
    for result in eligible:
        difference = np.subtract(result.per_fold["nll"], best.per_fold["nll"])
        standard_error = np.std(difference, ddof=1) / math.sqrt(len(difference))
        if difference.mean() <= min(standard_error, TIE_TOLERANCE * best.mean("nll")):
            tied.append(result)
    order = guideline_order(comparison.n_samples, comparison.n_classes, preserve_accuracy)

    def rank(result: MethodResult) -> tuple[int, float]:
        position = order.index(result.candidate.name) if result.candidate.name in order else len(order)
        return position, result.mean("nll")

    chosen = min(tied, key=rank)
    text = (
        f"{chosen.candidate.name}: cross-validated NLL {chosen.mean('nll'):.5f} ± {chosen.std('nll'):.5f} "
        f"({comparison.folds} folds) against {baseline:.5f} uncalibrated; "
    )
    if len(tied) == 1:
        runner_up = sorted(eligible, key=lambda r: r.mean("nll"))[1:2]
        text += "the lowest of the eligible candidates, beyond the noise of the folds"
        if runner_up:
            text += f" (next: {runner_up[0].candidate.name} {runner_up[0].mean('nll'):.5f})"
    else:
        others = ", ".join(f"{r.candidate.name} {r.mean('nll'):.5f}" for r in tied if r is not chosen)
        text += (
            f"tied with {others} (the lowest is {best.candidate.name}; tied means a mean paired fold "
            f"difference within one standard error and below {TIE_TOLERANCE:.2%} of the lowest), and first "
            "of these in the Mix-n-Match guideline order"
        )
    if preserve_accuracy:
        text += "; only accuracy-preserving maps were eligible"
    return Selection(chosen.candidate, text + ".", [r.candidate.name for r in tied], excluded)
