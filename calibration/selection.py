"""Choosing a calibration method from a cross-validated comparison (``calibration.comparison``)
by a stated rule.

``select`` applies the rule in four steps.

1. **Constraints.** A candidate is eligible when it is accuracy-preserving (only with
   ``preserve_accuracy``), its fit converged in every fold, its cross-validated NLL is finite
   without the probability floor (no held-out label got a probability below
   ``probability_floor.EPSILON``; served probabilities are floored there, so the measured NLL is
   always finite) and below the uncalibrated NLL, and it passes the support guard (2).

2. **Support guard** (a class separable in the validation split but not in test).
   Held-out NLL only scores the labels that occur; it cannot see a class that the
   candidate has declared impossible for rows where no such label happens to fall. So in each
   fold the candidate's held-out probabilities ``c`` are compared with those of temperature
   scaling fitted on the same folds, ``r`` (``metrics.scores.tail_risk``)::

       tail = mean_i sum_{j : c_ij < 1e-6 r_ij} r_ij log(r_ij / c_ij)

   the extra NLL expected were the labels drawn from ``r``, counted only where the candidate
   is more than a million times more certain than TS that a class is wrong (a claim no
   validation set of realistic size can check). A candidate whose mean tail exceeds its
   cross-validated NLL gain over that reference, ``tail > NLL_TS - NLL``, is refused: its
   gain does not pay for the risk it takes. The threshold is no tuned constant. On the
   synthetic trap of ``tests/core/test_selection_guard.py`` (class 0 separable in validation,
   5% of its test rows like the others) vector and Dirichlet scaling have tails of 0.6-0.9 nats
   per row against gains of 0.001-0.03, and test NLLs 3-10% worse than uncalibrated; refused,
   auto takes TS or ETS there. On the sets in ``shared/data`` every vector and Dirichlet fit
   that gains on TS has a tail of 0 to 3e-4 and keeps its place; the isotonic maps, whose
   zeros sit where TS gives up to 1e-3 (tails 0.005-0.1), and Dirichlet on
   cifar10_resnet50_cross_entropy (tail 0.01) and vector on cifar100_densenet-bc-100 (tail 3e-4),
   neither of which gains on TS, are refused. The ratio 1e-6 is wide
   enough that a map merely sharper than TS never counts.

3. **The simpler candidate unless the more complex one wins clearly.** Candidates fall in
   ``COMPLEXITY`` classes: one temperature (TS, EC, ETS, whose two extra weights lie on the
   simplex), one shared map (IRM, Platt, histogram binning), per-class maps (vector scaling,
   class temperatures, IROvA, IROvA-TS), full matrices (Dirichlet, matrix scaling). The
   *incumbent* is the rule of step 4 applied to the eligible candidates of the simplest class
   present. A candidate of a more complex class stays in the running only when it beats the
   incumbent clearly: its paired per-fold NLL differences ``delta_f = NLL_f - NLL_f(incumbent)``
   have ``mean(delta) < -CLEAR_FACTOR * se(delta)``, ``se = sd(delta) / sqrt(folds)``: it wins by
   more than its fold-to-fold noise. ``CLEAR_FACTOR = 1``, tuned on ``shared/data`` with
   ``benchmarks/selection.py``: there the paired ratios ``mean/se`` of the complex winners are
   -16 to -3.2 (kept at any factor up to 3), -1.5 (vector on cifar10_resnet50_cross_entropy:
   a factor of 2, a one-sided paired t-test at about 95% on the 4 degrees of freedom of 5 folds,
   would give TS there, 2.9% worse on test) and -0.7 (vector on cifar100_wrn16-4, which loses 3
   folds of 5: TS is kept, 1.05% worse on test in hindsight). A complex candidate that wins 4
   folds of 5 by a small margin and loses the fifth by more stays within its noise and does
   not displace the simpler one. With much data (at least ``MUCH_DATA_PER_CLASS`` validation
   rows per class) and no accuracy constraint, IROvA-TS counts with the simplest class, as the
   Mix-n-Match guideline advises it there.

4. **Lowest NLL, ties to the guideline.** Among the incumbent's class and the clear winners,
   take the lowest mean NLL. A candidate counts as tied with that best when its mean paired
   per-fold NLL difference is both within one standard error (the folds cannot tell them
   apart) and below ``TIE_TOLERANCE`` = 0.25% of the best NLL (the difference does not matter
   in practice: on the sets in ``shared/data`` cross-validated gaps of 0.5% became test-set
   gaps of 1-2%, so a wider band would trade real NLL for the guideline). A tie goes to the
   candidate that comes first in the Mix-n-Match guideline order (Zhang, Kailkhura & Han,
   "Mix-n-Match: Ensemble and Compositional Methods for Uncertainty Calibration in Deep
   Learning", ICML 2020, §5): data-efficient parametric maps (ETS, TS, EC) first; then IRM
   (for when the parametric form is wrong); then IROvA-TS, which goes first instead when
   there is much data and no accuracy constraint; then the rest.

``benchmarks/selection.py`` reports, per set and for the trap, the pick, its test NLL, the
best candidate's and the uncalibrated one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .candidates import Candidate
from .comparison import Comparison, MethodResult
from .probability_floor import EPSILON

MUCH_DATA_PER_CLASS = 500
TIE_TOLERANCE = 0.0025
CLEAR_FACTOR = 1.0

#: complexity classes of step 3 (by candidate name, then method; 2 where unknown)
COMPLEXITY = {
    "temperature": 0, "expectation_consistency": 0, "ensemble_temperature": 0,
    "isotonic_multiclass": 1, "platt": 1, "histogram_binning": 1,
    "vector": 2, "class_temperature": 2, "isotonic_one_vs_all": 2, "irova_ts": 2, "composition": 2,
    "dirichlet": 3, "matrix": 3,
}

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


def complexity(result: MethodResult, much_data: bool) -> int:
    """The complexity class of step 3 (IROvA-TS with the simplest when ``much_data``)."""
    name, method = result.candidate.name, result.candidate.method
    if much_data and name == "irova_ts":
        return 0
    return COMPLEXITY.get(name, COMPLEXITY.get(method, 2))


def paired(result: MethodResult, other: MethodResult) -> tuple[float, float]:
    """Mean and standard error of the per-fold NLL differences ``result - other``."""
    difference = np.subtract(result.per_fold["nll"], other.per_fold["nll"])
    se = float(np.std(difference, ddof=1) / math.sqrt(len(difference))) if len(difference) > 1 else 0.0
    return float(difference.mean()), se


def _exclusion(result: MethodResult, comparison: Comparison, baseline: float, preserve_accuracy: bool,
               guards: bool):
    """Why ``result`` is not eligible (steps 1 and 2), or ``None``."""
    value = result.mean("nll")
    if result.error is not None:
        return f"failed: {result.error}"
    if preserve_accuracy and not result.accuracy_preserving:
        return "not accuracy-preserving"
    if not result.converged:
        return "its solver did not converge in every fold"
    if result.floored_labels:
        return (f"cross-validated NLL is infinite without the probability floor ({result.floored_labels} "
                f"held-out labels got a probability below {EPSILON:.3g})")
    if not value < baseline:
        return f"cross-validated NLL {value:.6g} is not below the uncalibrated {baseline:.6g}"
    if guards and result.tail_risk and comparison.reference_nll:
        tail, gain = float(np.mean(result.tail_risk)), float(np.mean(comparison.reference_nll)) - value
        if tail > 0 and tail > gain:
            return (f"support guard: tail risk {tail:.4g} (expected NLL on classes it declares "
                    f"a million times less likely than TS does) exceeds its gain {gain:.4g} over TS")
    return None


def _lowest_with_ties(pool: list[MethodResult], order: list[str]) -> tuple[MethodResult, MethodResult, list]:
    """Step 4: ``(chosen, lowest, tied)``."""
    best = min(pool, key=lambda r: r.mean("nll"))
    tied = []
    for result in pool:
        mean, se = paired(result, best)
        if mean <= min(se, TIE_TOLERANCE * best.mean("nll")):
            tied.append(result)

    def rank(result: MethodResult) -> tuple[int, float]:
        position = order.index(result.candidate.name) if result.candidate.name in order else len(order)
        return position, result.mean("nll")

    return min(tied, key=rank), best, tied


def select(comparison: Comparison, preserve_accuracy: bool = False, guards: bool = True) -> Selection:
    """Apply the selection rule of the module docstring to a ``Comparison``; ``guards=False``
    leaves out steps 2 and 3 (held-out NLL alone, for comparisons)."""
    baseline = float(np.mean(comparison.uncalibrated["nll"]))
    excluded: dict[str, str] = {}
    eligible = []
    for result in comparison.results:
        reason = _exclusion(result, comparison, baseline, preserve_accuracy, guards)
        if reason is None:
            eligible.append(result)
        else:
            excluded[result.candidate.name] = reason
    if not eligible:
        raise ValueError(f"no candidate passes the constraints: {excluded}")
    order = guideline_order(comparison.n_samples, comparison.n_classes, preserve_accuracy)
    much_data = not preserve_accuracy and comparison.n_samples >= MUCH_DATA_PER_CLASS * comparison.n_classes
    simplest = min(complexity(r, much_data) for r in eligible) if guards else math.inf
    pool = [r for r in eligible if not guards or complexity(r, much_data) == simplest]
    incumbent = _lowest_with_ties(pool, order)[0]
    held_back: list[MethodResult] = []
    for result in eligible:
        if guards and complexity(result, much_data) > simplest:
            mean, se = paired(result, incumbent)
            (pool if mean < -CLEAR_FACTOR * se else held_back).append(result)
    chosen, best, tied = _lowest_with_ties(pool, order)
    text = (
        f"{chosen.candidate.name}: cross-validated NLL {chosen.mean('nll'):.5f} ± {chosen.std('nll'):.5f} "
        f"({comparison.folds} folds) against {baseline:.5f} uncalibrated; "
    )
    if len(tied) == 1:
        runner_up = sorted(pool, key=lambda r: r.mean("nll"))[1:2]
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
    lower = [r for r in held_back if r.mean("nll") < chosen.mean("nll")]
    if lower:
        text += (f"; preferred to the more complex {', '.join(r.candidate.name for r in lower)}, lower on "
                 f"average but not by more than {CLEAR_FACTOR:g} standard errors of the paired fold "
                 f"differences against {incumbent.candidate.name}")
    if preserve_accuracy:
        text += "; only accuracy-preserving maps were eligible"
    return Selection(chosen.candidate, text + ".", [r.candidate.name for r in tied], excluded)
