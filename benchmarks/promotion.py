"""Gated promotion on real model outputs (issue #21): how often the evaluation's verdict promotes
an equally good challenger, and how many labels a better one needs.

A stream draws rows of a data set's test split with replacement (its labels are the rows' labels);
the test split is the population, so every true difference is known exactly. Champion and
challenger are temperature scalings; each stream row gives the paired difference of floored NLLs
``d = nll_challenger - nll_champion`` (each ``-log max(p_y, EPSILON)``, in ``[0, log(1/EPSILON)]``; not
clipped, issue #35) and the gate promotes as soon as the upper bound of the empirical-Bernstein
confidence sequence on its mean (``calibration.difference_cs`` with bound ``log(1/EPSILON)``, level
alpha, Waudby-Smith & Ramdas 2023) and the running mean of ``d`` are both below 0 (the rule of
``calibration.compare_losses``), checked after **every** label: a verdict taken at a data-dependent
time, which is what an evaluation repeated as labels arrive does.

* **Equal by construction**: the champion at ``0.85 T*`` (``T*`` minimising the population NLL),
  the challenger at the temperature above ``T*`` whose population mean of ``d`` is exactly 0
  (Brent's method): different probabilities, equally good. Promotion must happen in at most alpha
  of the streams (the CS guarantees alpha/2 for this side).
* **Exchangeable refits**: per repetition, the validation split is halved at random and a
  temperature scaling fitted on each half; the second is the challenger. Neither is better in
  distribution; in a given repetition one is better by a hair (its true difference is known). A
  promotion is *harmful* when the challenger's true mean ``d`` is >= 0.
* **A better challenger**: the served logits are multiplied by ``s`` (the model grows
  over-confident, a temperature shift); the champion is the scaling fitted on the unshifted
  validation split, the challenger the one refitted on the shifted validation split (the policy's
  refit). Reported: the share promoted within the horizon, and the median (and 90th percentile)
  number of labels until promotion.
* For contrast, a **naive peeking test**: a one-sided z-test at 5% on the running mean of ``d``,
  checked every 100 labels, and the same test looked at once, at the horizon.

Intervals are exact (Clopper-Pearson) 95% intervals of the rates. Run:
``python benchmarks/promotion.py [streams] [horizon]`` (default 1000, 20000; under a minute on
one core); results in benchmarks/results/promotion.md.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from scipy.optimize import brentq, minimize_scalar
from scipy.stats import beta

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import calibration as cal
from benchmarks._common import environment, write
from calibration.probability_floor import EPSILON, LOG_BOUND

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SETS = ["cifar10_resnet50_cross_entropy", "cifar100_densenet-bc-100", "cifar10_lenet5"]
ALPHA, CHUNK, PEEK_EVERY = 0.05, 100, 100
SHIFTS = [1.25, 1.5, 2.0]


def load(name: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    with np.load(DATA / f"{name}_{split}.npz") as data:
        x = data["logits"] if "logits" in data else np.log(np.clip(data["probs"], 1e-12, 1))
        return x.astype(np.float64), data["labels"].astype(np.int64)


def row_nll(logits: np.ndarray, labels: np.ndarray, temperature: float) -> np.ndarray:
    return np.minimum(-cal.log_softmax(logits / temperature)[np.arange(len(labels)), labels], LOG_BOUND)


def fitted_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    return float(cal.create("temperature").fit(logits, labels).temperature_)


def interval(k: int, n: int) -> str:
    low = beta.ppf(0.025, k, n - k + 1) if k else 0.0
    high = beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return f"{k / n:.4f} [{low:.4f}, {high:.4f}]"


def run_streams(differences: np.ndarray, streams: int, horizon: int, rng) -> dict:
    """Stream ``streams`` resamples of ``horizon`` rows from ``differences`` (one population, or one
    row per stream) and return, per stream, the first label count at which the CS's upper bound is
    below 0 (0: never), whether its lower bound ever went above 0, and the naive tests' decisions."""
    first, other_side, peeked, once = [], [], [], []
    checkpoints = np.arange(PEEK_EVERY, horizon + 1, PEEK_EVERY) - 1
    t = np.arange(1, horizon + 1)
    for start in range(0, streams, CHUNK):
        count = min(CHUNK, streams - start)
        rows = rng.integers(0, differences.shape[-1], (count, horizon))
        x = differences[rows] if differences.ndim == 1 else np.take_along_axis(differences[start:start + count],
                                                                               rows, axis=1)
        lower, upper = cal.difference_cs(x, LOG_BOUND, ALPHA)
        first.append(cal.first_crossing(np.where(np.cumsum(x, axis=1) < 0, upper, 1.0)))
        other_side.append(lower[:, -1] > 0)
        mean = np.cumsum(x, axis=1) / t
        variance = np.maximum(np.cumsum(x * x, axis=1) / t - mean ** 2, 1e-300)
        z = mean / np.sqrt(variance / t)
        peeked.append((z[:, checkpoints] < -1.6449).any(axis=1))
        once.append(z[:, -1] < -1.6449)
    return {"first": np.concatenate(first), "other_side": np.concatenate(other_side),
            "peeked": np.concatenate(peeked), "once": np.concatenate(once)}


def equal_by_construction(name: str, streams: int, horizon: int, rng) -> list:
    logits, labels = load(name, "test")
    best = minimize_scalar(lambda v: row_nll(logits, labels, v).mean(), bounds=(0.05, 20), method="bounded").x
    champion = row_nll(logits, labels, 0.85 * best)

    def gap(temperature: float) -> float:
        return float((row_nll(logits, labels, temperature) - champion).mean())

    challenger_t = brentq(gap, best, 20 * best, xtol=1e-12)
    d = row_nll(logits, labels, challenger_t) - champion
    result = run_streams(d, streams, horizon, rng)
    promoted = int((result["first"] > 0).sum())
    return [name, "equal by construction", f"T {0.85 * best:.3f} vs {challenger_t:.3f}", f"{d.mean():.1e}",
            f"{d.std():.3f}", interval(promoted, streams),
            interval(int(((result["first"] > 0) | result["other_side"]).sum()), streams), "-",
            interval(int(result["peeked"].sum()), streams), interval(int(result["once"].sum()), streams)]


def exchangeable(name: str, streams: int, horizon: int, rng) -> list:
    val, val_labels = load(name, "val")
    test, test_labels = load(name, "test")
    half = len(val_labels) // 2
    differences = np.empty((streams, len(test_labels)))
    for i in range(streams):
        order = rng.permutation(len(val_labels))
        a, b = order[:half], order[half:]
        champion_t = fitted_temperature(val[a], val_labels[a])
        challenger_t = fitted_temperature(val[b], val_labels[b])
        differences[i] = row_nll(test, test_labels, challenger_t) - row_nll(test, test_labels, champion_t)
    truth = differences.mean(axis=1)
    result = run_streams(differences, streams, horizon, rng)
    promoted = result["first"] > 0
    worse = truth >= 0
    harmful = int((promoted & worse).sum())

    def naive(decided: np.ndarray) -> str:
        return f"{interval(int(decided.sum()), streams)}; harmful {interval(int((decided & worse).sum()), streams)}"

    return [name, "exchangeable refits", "halves of val", f"{np.abs(truth).mean():.1e} (mean abs)",
            f"{differences.std(axis=1).mean():.3f}", interval(int(promoted.sum()), streams),
            interval(int((promoted | result["other_side"]).sum()), streams), interval(harmful, streams),
            naive(result["peeked"]), naive(result["once"])]


def better(name: str, shift: float, streams: int, horizon: int, rng) -> list:
    val, val_labels = load(name, "val")
    test, test_labels = load(name, "test")
    champion_t = fitted_temperature(val, val_labels)
    challenger_t = fitted_temperature(shift * val, val_labels)
    d = row_nll(shift * test, test_labels, challenger_t) - row_nll(shift * test, test_labels, champion_t)
    first = run_streams(d, streams, horizon, rng)["first"]
    promoted = first[first > 0]
    delay = (f"{int(np.median(promoted))} / {int(np.percentile(promoted, 90))}" if len(promoted) > streams / 2
             else f"> {horizon}")
    return [name, f"x{shift}", f"T {champion_t:.3f} -> {challenger_t:.3f}", f"{d.mean():.4f}",
            interval(len(promoted), streams), delay]


def main() -> None:
    streams = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    horizon = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    rng = np.random.default_rng(21)
    started = time.perf_counter()
    null_rows = []
    for name in SETS:
        null_rows.append(equal_by_construction(name, streams, horizon, rng))
        null_rows.append(exchangeable(name, streams, horizon, rng))
        print(null_rows[-2], null_rows[-1], flush=True)
    shift_rows = [better(name, shift, streams, horizon, rng) for name in SETS for shift in SHIFTS]
    elapsed = time.perf_counter() - started
    null_table = ["| " + " | ".join(str(c) for c in row) + " |" for row in null_rows]
    notes = "\n".join([
        f"{streams} streams of {horizon} labels per row, alpha = {ALPHA}, NLL floored at {EPSILON:.3g}, "
        f"differences unclipped (bound {LOG_BOUND:.2f}), a promotion also needs the running mean below 0; "
        f"{elapsed:.0f} s.",
        "",
        "**Equally good challengers** (rates with exact 95% intervals): *promoted* is the gate's rate (the CS's "
        "upper bound below 0 at any label); *any verdict* counts either side; *harmful* counts promotions "
        "of a challenger whose true mean difference is >= 0; the naive z-test at 5% peeked every "
        f"{PEEK_EVERY} labels, and looked at once at the horizon (for exchangeable refits, where one of the two "
        "is truly better by a hair in each repetition, a naive decision is harmful when it picks the challenger "
        "and the challenger is not better).",
        "",
        "| set | null | temperatures | true mean d | sd of d | promoted | any verdict | harmful | "
        "naive peeking | naive once |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *null_table,
        "",
        "**Better challengers** (the table above): logits multiplied by s after the champion was fitted; the "
        "challenger refitted on the shifted validation split. *labels until promotion*: median / 90th "
        "percentile over the streams promoted within the horizon. Every promotion here has a true mean "
        "difference below 0 (listed): no promotion raised the population NLL.",
    ])
    write("promotion", "Gated promotion: equally good and better challengers on real outputs",
          ["set", "shift s", "temperatures", "true mean d (NLL)", "promoted within horizon",
           "labels until promotion (median / p90)"], shift_rows,
          environment(["numpy", "scipy"]), notes)


if __name__ == "__main__":
    main()
