"""Power of the drift monitors by simulation: for a calibrator and a shift of its inputs or labels,
how often and how fast the monitor the service runs (``calibration.monitoring.DriftTest``, and
without labels ``calibration.label_free``) alarms, and how often it alarms with no shift at all.

**The streams.** The calibrator's own labelled rows (raw inputs and labels) form a finite
population; a stream draws rows from it with replacement (a bootstrap of the deployment
distribution), ``streams`` streams of up to ``labels`` rows each, all fed at once to one
vectorised ``DriftTest`` (each stream its own e-process). A **shift** changes what a stream draws:

* ``temperature`` (size ``s > 0``): the raw logits are multiplied by ``s`` before the calibrator
  sees them (probabilities: ``softmax(s log p)``; binary scores: ``s * score``) — the model grew
  over- (``s > 1``) or under-confident (``s < 1``) after the calibrator was fitted;
* ``tweak_one`` (size ``rho`` in ``(0, 1)``): label shift, one class (``shift_class``, else a
  random class per stream) gets prior ``rho`` and the other classes share ``1 - rho`` in their
  source proportions; rows are drawn class first, then uniformly within the class;
* ``dirichlet`` (size ``a > 0``): label shift, each stream's priors are drawn from
  ``Dirichlet(a * 1)`` over the classes present (Alexandari et al. 2020's protocol);
* ``swap`` (size ``m``, a whole number of pairs): concept shift, the labels of ``m`` disjoint
  class pairs (``swap_classes``, else random pairs per stream) are exchanged; the inputs are not.

Each stream's **detection delay** is the number of labels until its e-value first reaches
``1/alpha`` (``DriftTest.alarm_at``), censored at ``labels``. The answer gives the detection
probability within each checkpoint ``N`` (alarms / streams, with its exact Clopper–Pearson
interval) and quantiles of the delay with distribution-free intervals: for the ``q``-quantile of
``m`` streams, the order statistics ``T_(l)`` and ``T_(u)`` with ``l = B^-1(a/2)`` and
``u = B^-1(1 - a/2) + 1`` for ``B`` the Binomial(m, q) distribution function (coverage at least
``1 - a``; a censored order statistic reads "more than ``labels``", ``null``). The **null run** is
the same simulation without the shift (a fresh seed): its alarm rate is the false-alarm rate the
monitor shows on this population (at most ``alpha`` when the population itself is within the
tolerances — when it is not, the "null" is already a drift the monitor should see).

**What can be seen at all**: the monitor tests ``|E r| <= eps`` for the top-label residual
``r = max_j p_j - [argmax_j p_j = y]`` and ``|E[p_j - [y = j]]| <= eps_c`` per class, so a shift
whose expected residuals stay within the tolerances never alarms more than the null, however
long the stream. ``drift`` gives those expectations under the shift, computed exactly from the
population (class-conditional means weighted by the stream's priors, with its label
permutation), and the share of streams whose drift exceeds a tolerance (``visible``).

**Without labels** (``signal="label_free"``) the rows are split at random in half: one half is the
reference (``calibration.label_free.label_free_test``, which spends half of ``alpha`` on its
bounds and widens the tolerances by them, as the service does), the streams draw from the other;
the residuals are ``label_free.residuals``. A class swap is invisible to it by construction.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TypedDict

import numpy as np

from . import label_free
from .monitoring import DriftTest
from .power_simulation import (
    QUANTILES,
    SHIFTS,
    SIGNALS,
    Population,
    PowerResult,
    Shift,
    checkpoints_for,
    clopper_pearson,
    quantile_interval,
    shifted_inputs,
    simulate,
)

__all__ = ["QUANTILES", "SHIFTS", "SIGNALS", "Population", "PowerResult", "Shift", "checkpoints_for",
           "clopper_pearson", "power", "quantile_interval", "shifted_inputs"]


class _TestOptions(TypedDict):
    """The options a labelled and a label-free test of one power run share."""

    alpha: float
    tolerance: float
    class_tolerance: float
    half_life: float


def _two_columns(probs) -> np.ndarray:
    """Calibrated probabilities as ``n x k`` float64 (a binary ``(n,)`` is class 1's)."""
    p = np.asarray(probs, dtype=np.float64)
    return np.column_stack([1.0 - p, p]) if p.ndim == 1 else p


def power(calibrate: Callable[[np.ndarray], np.ndarray], inputs: np.ndarray, kind: str, labels: np.ndarray,
          shift: Shift, *, streams: int = 200, max_labels: int = 50_000, signal: str = "labelled",
          alpha: float = 0.01, tolerance: float = 0.02, class_tolerance: float = 0.02, half_life: float = 1000.0,
          checkpoints: list[int] | None = None, confidence: float = 0.95, seed: int = 0,
          progress: Callable[[str, float], None] | None = None) -> dict:
    """The detection of ``shift`` by the drift monitor, and its false alarms without it, simulated
    on the labelled rows ``inputs`` (raw, of input ``kind``: logits, probabilities or scores) and
    ``labels`` through ``calibrate`` (raw inputs to calibrated probabilities, ``n x k``).
    ``streams`` streams of up to ``max_labels`` rows; the monitor's options as the service's.
    Returns plain numbers (see the module): ``shifted`` and ``null``, each with ``detected``
    (within ``max_labels``), ``within`` (per checkpoint), ``delay`` (quantiles) and ``drift``.
    ``progress(step, percent)`` is called at every 5 percent of the work."""
    if signal not in SIGNALS:
        raise ValueError(f"signal must be one of {', '.join(SIGNALS)}, got {signal!r}")
    if streams < 1 or max_labels < 1:
        raise ValueError("streams and max_labels must be at least 1")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    y = np.asarray(labels, dtype=np.int64)
    base = _two_columns(calibrate(inputs))
    if base.ndim != 2 or base.shape[0] != len(y) or len(y) < (4 if signal == "label_free" else 1):
        raise ValueError(f"calibrate must give one row of class probabilities per label; got {base.shape} "
                         f"for {len(y)} labels (the label-free signal needs at least 4 rows)")
    k = base.shape[1]
    if y.min() < 0 or y.max() >= k:
        raise ValueError(f"labels must lie in [0, {k})")
    shift.check(k)
    if signal == "label_free" and shift.kind == "swap":
        raise ValueError("the label-free signal cannot see a class swap (it never reads a label)")
    points = sorted({int(c) for c in (checkpoints or checkpoints_for(max_labels)) if 1 <= c <= max_labels}
                    | {max_labels})
    shifted_probs = _two_columns(calibrate(shifted_inputs(inputs, kind, shift.size))) \
        if shift.kind == "temperature" else base
    rng_split, rng_shift, rng_null = np.random.default_rng(seed).spawn(3)
    rows = np.arange(len(y))
    reference = None
    options = _TestOptions(alpha=alpha, tolerance=tolerance, class_tolerance=class_tolerance, half_life=half_life)

    def monitor() -> DriftTest:
        if signal == "labelled":
            return DriftTest(**options, max_bet=0.5, shape=(streams,), n_classes=k)
        return label_free.label_free_test(base[reference_rows], **options, shape=(streams,))[0]

    if signal == "label_free":
        permuted = rng_split.permutation(len(y))
        reference_rows, rows = permuted[: len(y) // 2], permuted[len(y) // 2:]
        reference = label_free.label_free_test(base[reference_rows], **options)[1]
    out = {}
    told: list[float] = [-1]  # the last 5% step reported

    def report(step: str, start: float, share: float) -> None:
        percent = start + 50.0 * share
        if progress is not None and percent // 5 > told[0]:
            told[0] = percent // 5
            progress(step, percent)

    runs = (("shifted", shifted_probs, shift, rng_shift, 0.0), ("null", base, None, rng_null, 50.0))
    for name, probs, chosen, rng, start in runs:
        step = f"{name} streams: {streams} x up to {max_labels} labels"
        result = simulate(Population(probs[rows], y[rows]), monitor(), chosen, max_labels, rng, reference,
                           partial(report, step, start))
        out[name] = result.summary(points, confidence)
    test = monitor()
    return {"shift": {"kind": shift.kind, "size": shift.size, "shift_class": shift.shift_class,
                      "swap_classes": list(shift.swap_classes) if shift.swap_classes else None},
            "signal": signal, "alpha": alpha, "tolerance": tolerance, "class_tolerance": class_tolerance,
            "half_life": half_life, "confidence": confidence, "seed": seed, "rows": len(rows),
            "reference_rows": int(len(y) - len(rows)), "n_classes": k,
            "monitor_tolerance": float(test.tolerance),
            "monitor_class_tolerance_max": float(np.max(test.class_tolerance)), **out}
