"""Drift alarms on real model outputs (issue #20): the anytime-valid e-process of
``calibration.monitoring.DriftTest`` against a fixed threshold on the windowed ECE checked at
every window, on streams resampled from the test splits of ../shared/data.

For each data set a temperature scaling is fitted on the validation split and serves the test
split; a stream draws test rows with replacement (its labels are the rows' labels).

* **No shift**: ``streams`` streams of ``horizon`` labelled rows each. The e-process (tolerances
  0.02, half-life 1000 rows; both games: top-label and class frequencies) alarms when its e-value
  reaches 1/alpha; its null hypothesis is ``|mean_confidence - accuracy| <= 0.02`` and, for every
  class, ``|mean p_j - frequency_j| <= 0.02`` at every step, which the resampled stream satisfies
  when the test split's own gaps (listed) are within 0.02. A second row per data set draws the
  labels from the served probabilities (the boundary of the null, tolerances 0). The windowed check
  computes the 15-bin ECE of every block of ``WINDOW`` rows and alarms when one exceeds a
  threshold set as the 95% (99%) quantile of the window ECE under no shift: a test of level 5%
  (1%) *per check*, peeked at every window.
* **Shifts** injected after ``SHIFT_AT`` calibrated rows, the stream then running ``AFTER`` rows:
  a temperature change of the logits (``logits * s``, served through the same calibrator), a
  Dirichlet label-prior shift (priors ~ Dir(a * 1) per stream, as Alexandari et al. 2020), a
  "tweak-one" shift (one random class gets prior rho, the others share the rest), and a class
  swap (the labels of random disjoint class pairs exchanged). The delay is the number of labelled
  rows from the shift to the alarm, its median over the streams that alarmed. The label-free
  e-process (``calibration.monitoring.label_free_residuals``, the service's ``label_free``
  monitor) watches the same rows without their labels, against the unshifted test split's mean
  confidence and mean class probabilities (the population's own: in the service the reference is
  estimated from the labelled observations, and ``benchmarks/label_free_reference.py`` measures
  that monitor, which accounts for the reference's sampling error); it cannot see a class swap,
  which only the labels show.

Run: ``python benchmarks/drift_alarms.py [streams] [horizon] [shift_streams] [exact_horizon]``
(default 1000, 100000, 300, 20000; about 7 minutes on one idle core); results in
benchmarks/results/drift_alarms.md.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import beta

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import calibration as cal
from benchmarks._common import environment, write
from calibration.monitoring import DriftTest
from tests.helpers import load_split

DATASETS = ["cifar10_resnet50_cross_entropy", "cifar10_lenet5", "cifar100_densenet-bc-100"]
TOLERANCE, CLASS_TOLERANCE, HALF_LIFE, ALPHAS = 0.02, 0.02, 1000.0, (0.01, 0.05)
WINDOW, N_BINS, BLOCK = 1000, 15, 1000
SHIFT_AT, AFTER = 10_000, 20_000
SHIFTS = [("temperature", 1.25), ("temperature", 1.5), ("temperature", 2.0), ("temperature", 0.75),
          ("dirichlet", 1.0), ("dirichlet", 0.1), ("tweak-one", 0.5), ("tweak-one", 0.9),
          ("class swap", 1), ("class swap", 3)]


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    a = (1 - level) / 2
    low = beta.ppf(a, k, n - k + 1) if k else 0.0
    high = beta.ppf(1 - a, k + 1, n - k) if k < n else 1.0
    return float(low), float(high)


class Served:
    """The test split through the fitted calibrator: calibrated probabilities (and after a
    temperature change of the inputs), top-label confidence, predicted class, label per row."""

    def __init__(self, name: str):
        kind, val, val_labels = load_split(name, "val")
        _, test, self.labels = load_split(name, "test")
        self.logits = test.astype(np.float64) if kind == "logits" else np.log(np.clip(test, 1e-12, 1.0))
        self.calibrator = cal.create("temperature", {"input": "logits"}).fit(
            val.astype(np.float64) if kind == "logits" else np.log(np.clip(val, 1e-12, 1.0)), val_labels)
        self.probs = self.calibrator.predict_proba(self.logits)
        self.k = self.probs.shape[1]
        self.confidence, self.predicted = self.probs.max(axis=1), self.probs.argmax(axis=1)
        self.table = (self.probs, self.confidence, self.predicted)  # what the samplers hand out
        self.order = np.argsort(self.labels, kind="stable")
        self.class_start = np.searchsorted(self.labels[self.order], np.arange(self.k))
        self.class_count = np.bincount(self.labels, minlength=self.k)

    def rows_with_priors(self, rng, priors: np.ndarray, size: int) -> np.ndarray:
        """Rows drawn with class priors ``priors`` (streams x k), ``size`` per stream."""
        cumulative = np.cumsum(priors, axis=1)
        u = rng.random((len(priors), size))
        classes = np.minimum((u[:, :, None] > cumulative[:, None, :]).sum(axis=2), self.k - 1)
        within = (rng.random(classes.shape) * self.class_count[classes]).astype(np.int64)
        return self.order[self.class_start[classes] + within]


def shift_sampler(served: Served, rng, streams: int, kind: str, size):
    """A function of the block size giving ((probabilities, confidence, prediction) of the rows
    as served, rows, labels) for the shifted part."""
    k = served.k
    if kind == "temperature":
        probs = served.calibrator.predict_proba(served.logits * size)
        table = (probs, probs.max(axis=1), probs.argmax(axis=1))
        return lambda b: _uniform(rng, streams, b, served, table)
    if kind in ("dirichlet", "tweak-one"):
        if kind == "dirichlet":
            priors = rng.dirichlet(np.full(k, size), size=streams)
        else:
            priors = np.full((streams, k), (1 - size) / (k - 1))
            priors[np.arange(streams), rng.integers(0, k, streams)] = size

        def prior_shifted(b):
            rows = served.rows_with_priors(rng, priors, b)
            return served.table, rows, served.labels[rows]
        return prior_shifted
    permutation = np.tile(np.arange(k), (streams, 1))  # class swap: `size` disjoint pairs per stream
    for s in range(streams):
        pairs = rng.choice(k, size=2 * size, replace=False).reshape(size, 2)
        permutation[s, pairs[:, 0]], permutation[s, pairs[:, 1]] = pairs[:, 1], pairs[:, 0]

    def swapped(b):
        table, rows, labels = _uniform(rng, streams, b, served, served.table)
        return table, rows, np.take_along_axis(permutation, labels, axis=1)
    return swapped


def _uniform(rng, streams: int, b: int, served: Served, table: np.ndarray):
    rows = rng.integers(0, len(served.labels), (streams, b))
    return table, rows, served.labels[rows]


def window_ece(confidence: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """15-bin top-label ECE of each row of (streams x WINDOW) arrays, bins (lo, hi]."""
    streams, width = confidence.shape
    bins = np.clip(np.ceil(confidence * N_BINS).astype(np.int64) - 1, 0, N_BINS - 1)
    flat = (bins + N_BINS * np.arange(streams)[:, None]).ravel()
    gap = (np.bincount(flat, weights=confidence.ravel(), minlength=streams * N_BINS)
           - np.bincount(flat, weights=correct.ravel(), minlength=streams * N_BINS))
    return np.abs(gap).reshape(streams, N_BINS).sum(axis=1) / width


def run(served: Served, rng, streams: int, horizon: int, shifted=None, shift_at: int | None = None,
        exact: bool = False, tolerance: float = TOLERANCE, label_free: bool = False):
    """Stream ``horizon`` rows per stream; returns, per alpha, the rows when the e-value first reached
    1/alpha (-1: never), the window ECEs (streams x windows), and with ``label_free`` the rows when
    the label-free e-process (no labels: against the unshifted split's mean confidence and mean
    class probabilities) reached 1/0.01. ``exact``: labels drawn from the served probabilities: the
    boundary of both nulls (then both tolerances are ``tolerance``)."""
    test = DriftTest(alpha=min(ALPHAS), tolerance=tolerance, half_life=HALF_LIFE, shape=(streams,),
                     n_classes=served.k, class_tolerance=tolerance if exact else CLASS_TOLERANCE)
    first = {alpha: np.full(streams, -1) for alpha in ALPHAS}
    free = DriftTest(alpha=0.01, tolerance=TOLERANCE, half_life=HALF_LIFE, shape=(streams,), n_classes=served.k,
                     class_tolerance=CLASS_TOLERANCE) if label_free else None
    reference_confidence, reference_mean = served.confidence.mean(), served.probs.mean(axis=0)
    eces, every = [], np.arange(streams)[:, None]
    step = max(1, min(BLOCK, 300_000 // (streams * served.k)))  # rows per update: temporaries in cache
    for start in range(0, horizon, BLOCK):
        if shifted is not None and start >= shift_at:
            table, rows, labels = shifted(BLOCK)
        else:
            table, rows, labels = _uniform(rng, streams, BLOCK, served, served.table)
        (probs, confidence_of, predicted_of) = table
        if exact:  # labels drawn from the served probabilities, row by row
            u = rng.random((streams, BLOCK))
            labels = np.stack([np.minimum((np.cumsum(probs[rows[:, t]], axis=1) < u[:, t, None]).sum(axis=1),
                                          served.k - 1) for t in range(BLOCK)], axis=1)
        confidence, correct = confidence_of[rows], predicted_of[rows] == labels
        residuals = confidence - correct
        for at in range(0, BLOCK, step):
            part = slice(at, at + step)
            class_residuals = probs[rows[:, part]]
            class_residuals[every, np.arange(class_residuals.shape[1])[None, :], labels[:, part]] -= 1.0
            test.update(residuals[:, part], class_residuals)
            if free is not None:
                free.update(confidence[:, part] - reference_confidence, probs[rows[:, part]] - reference_mean)
            for alpha in ALPHAS:  # the first row at which the e-value reached 1/alpha
                crossed = test.trajectory >= np.log(1 / alpha)
                hit = (first[alpha] < 0) & crossed.any(axis=1)
                first[alpha][hit] = start + at + crossed[hit].argmax(axis=1) + 1
        eces.append(window_ece(confidence, correct.astype(np.float64)))
    return first, np.column_stack(eces), (free.alarm_at if free is not None else None)


def main():
    streams = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    horizon = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    shift_streams = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    exact_horizon = int(sys.argv[4]) if len(sys.argv) > 4 else 20_000
    rng = np.random.default_rng(20)
    null_rows, shift_rows, seconds = [], [], {}
    for name in DATASETS:
        served = Served(name)
        check = rng.integers(0, len(served.labels), (2, WINDOW))
        correct = (served.predicted[check] == served.labels[check]).astype(np.float64)
        assert abs(window_ece(served.confidence[check], correct)[0]
                   - cal.ece(served.probs[check[0]], served.labels[check[0]])) < 1e-12
        gap = served.confidence.mean() - (served.predicted == served.labels).mean()
        class_gap = np.abs(served.probs.mean(axis=0) - served.class_count / len(served.labels)).max()
        for exact in (False, True):
            started = time.perf_counter()
            alarms, eces, _ = run(served, rng, streams, exact_horizon if exact else horizon, exact=exact,
                                  tolerance=0.0 if exact else TOLERANCE)
            seconds[name, exact] = time.perf_counter() - started
            levels = {level: float(np.quantile(eces, level)) for level in (0.95, 0.99)}
            if not exact:
                thresholds = levels  # the shifts are compared with the real labels' threshold
            row = [f"{name}, labels drawn from the served probabilities, tolerances 0, {exact_horizon} rows"
                   if exact else name,
                   "0, 0 (exact)" if exact else f"{gap:+.4f}, {class_gap:.4f}"]
            for alpha in ALPHAS:
                k = int((alarms[alpha] >= 0).sum())
                low, high = clopper_pearson(k, streams)
                row.append(f"{k / streams:.4f} [{low:.4f}, {high:.4f}]")
            for threshold in levels.values():
                k = int((eces > threshold).any(axis=1).sum())
                low, high = clopper_pearson(k, streams)
                row.append(f"{threshold:.4f}: {k / streams:.3f} [{low:.3f}, {high:.3f}]")
            null_rows.append(row)
            print(row, f"{seconds[name, exact]:.0f} s", flush=True)
        for kind, size in SHIFTS:
            shifted = shift_sampler(served, rng, shift_streams, kind, size)
            alarms, eces, free = run(served, rng, shift_streams, SHIFT_AT + AFTER, shifted, SHIFT_AT, label_free=True)
            free_delays = free[free > SHIFT_AT] - SHIFT_AT
            at = alarms[0.01]
            before = int(((at >= 0) & (at <= SHIFT_AT)).sum())
            delays = at[at > SHIFT_AT] - SHIFT_AT
            crossed = eces > thresholds[0.99]
            windows = np.where(crossed[:, SHIFT_AT // WINDOW:].any(axis=1),
                               crossed[:, SHIFT_AT // WINDOW:].argmax(axis=1), -1)
            window_delays = (windows[windows >= 0] + 1) * WINDOW
            shift_rows.append([name, kind, size, before,
                               f"{len(delays) / shift_streams:.3f}", _median(delays),
                               f"{len(window_delays) / shift_streams:.3f}", _median(window_delays),
                               int(((free >= 0) & (free <= SHIFT_AT)).sum()),
                               f"{len(free_delays) / shift_streams:.3f}", _median(free_delays)])
            print(shift_rows[-1], flush=True)
    env = environment(["numpy", "scipy"])
    notes = (f"Streams: {streams} x {horizon} rows per data set without shift ({max(seconds.values()):.0f} s at "
             f"most per run of {streams} streams), {shift_streams} x {SHIFT_AT + AFTER} with a shift after row "
             f"{SHIFT_AT}. E-process: tolerances {TOLERANCE} and {CLASS_TOLERANCE}, half-life {HALF_LIFE:.0f}; "
             f"windowed ECE: {N_BINS} bins, "
             f"windows of {WINDOW} rows, threshold = quantile of the no-shift window ECE. Intervals: Clopper-Pearson "
             "95%. The windowed check's detections after a shift include its false alarms: without any shift it "
             "alarms in 1 - 0.99^20 = 18% of streams over the 20 windows after row 10000 at q99 (see the rows "
             "above), and its delay is counted in whole windows.")
    write("drift_alarms", "Drift alarms: anytime-valid e-process vs a windowed ECE threshold",
          ["data set", "test mean conf - acc, max class gap", "e-process alarm rate, alpha 0.01", "alpha 0.05",
           "window ECE > q95 (per-check 5%): threshold: alarm rate", "> q99 (per-check 1%)"], null_rows, env, notes)
    text = (Path(__file__).parent / "results" / "drift_alarms.md").read_text()
    header = ["data set", "shift", "size", "e-process false alarms before the shift",
              f"e-process (alpha 0.01) detected within {AFTER}", "median delay (rows)",
              "window ECE > q99 detected", "median delay (rows)", "label-free false alarms before",
              "label-free e-process detected", "median delay (logged rows)"]
    lines = ["", "## Injected shifts", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in shift_rows]
    (Path(__file__).parent / "results" / "drift_alarms.md").write_text(text + "\n".join(lines) + "\n")
    print("\n".join(lines))


def _median(values) -> str:
    return f"{int(np.median(values))}" if len(values) else "-"


if __name__ == "__main__":
    main()
