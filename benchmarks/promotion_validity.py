"""Promotion validity (issue #35, item 1): how often the gate promotes a challenger whose mean
(floored) NLL is higher than the champion's, with the verdict read after every label.

A stream draws ``horizon`` rows with replacement from a population of paired per-row NLL
differences ``d = nll(challenger) - nll(champion)`` (each NLL ``-log max(p_y, EPSILON)``, the floor of
``calibration.probability_floor``), so the true mean ``Delta`` of the population is known exactly.
The gate (``calibration.compare_losses``'s rule, as a repeated evaluation or a policy applies it)
promotes at the first label ``t`` where the empirical-Bernstein CS's upper bound on the mean of ``d``
(bound ``log(1/EPSILON)``, no clipping) is below 0 **and** the running mean of ``d`` is below 0.
A promotion is *harmful* when ``Delta >= 0``; its rate must be at most alpha (alpha/2, in fact,
for one side). For contrast, the rule before issue #35: the CS on ``clip(d, -5, 5)``, promoting when
its upper bound is below 0, on the same streams.

Populations:

* **Real pairs**: on each set of ``../shared/data``, the champion is temperature scaling, the
  challenger isotonic one-vs-all (IROvA) or histogram binning, both fitted on the same validation
  split, the population their test split (the issue's CIFAR-10 ResNet-50 case among them). Where
  the challenger is better (``Delta < 0``), the share promoted within the horizon is its power.
* **Synthetic heavy-tailed pairs** (100000 rows): the champion's label probability is
  ``Beta(2, 1)``; the challenger's is better on most rows (its label logit raised by ``g``) but on a
  share ``q`` of rows it gives the label ``10^-U`` with ``U ~ Uniform(2, 300)`` (probabilities of 1e-300
  floored at EPSILON: NLL up to 36.04). ``g`` is solved (Brent) so that ``Delta`` is +0.001 (next to
  the boundary, where validity is hardest) or +0.01.

Rates are exact (Clopper-Pearson) 95% intervals. Run (from the repository root):
``python benchmarks/promotion_validity.py [streams] [horizon]`` (default 200, 50000); results in
benchmarks/results/promotion_validity.md.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.optimize import brentq
from scipy.stats import beta

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import calibration as cal
from benchmarks._common import environment, write
from calibration.probability_floor import LOG_BOUND
from calibration.sequential import row_nll

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SETS = ["cifar10_resnet50_cross_entropy", "cifar10_resnet50_focal_loss", "cifar10_lenet5", "cifar10_wrn16-4",
        "cifar100_lenet5", "cifar100_wrn16-4", "cifar100_densenet-bc-100"]
CHALLENGERS = ["isotonic_one_vs_all", "histogram_binning"]
ALPHA, OLD_CLIP, CHUNK = 0.05, 5.0, 25


def interval(k: int, n: int) -> str:
    low = beta.ppf(0.025, k, n - k + 1) if k else 0.0
    high = beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return f"{k}/{n} = {k / n:.3f} [{low:.3f}, {high:.3f}]"


def load(name: str, split: str):
    with np.load(DATA / f"{name}_{split}.npz") as data:
        if "logits" in data:
            return data["logits"], "logits", data["labels"]
        return data["probs"], "probabilities", data["labels"]


def streams_of(d: np.ndarray, streams: int, horizon: int, rng) -> dict:
    """Per stream: the first label at which the gate promotes (0: never), and whether the old
    clipped rule ever promoted."""
    first, old = [], []
    t = np.arange(1, horizon + 1)
    for start in range(0, streams, CHUNK):
        x = d[rng.integers(0, len(d), (min(CHUNK, streams - start), horizon))]
        _, upper = cal.difference_cs(x, LOG_BOUND, ALPHA)
        promote = (upper < 0) & (np.cumsum(x, axis=1) / t < 0)
        first.append(np.where(promote.any(axis=1), np.argmax(promote, axis=1) + 1, 0))
        _, old_upper = cal.difference_cs(np.clip(x, -OLD_CLIP, OLD_CLIP), OLD_CLIP, ALPHA)
        old.append((old_upper < 0).any(axis=1))
    return {"first": np.concatenate(first), "old": np.concatenate(old)}


def row(case: str, d: np.ndarray, streams: int, horizon: int, rng) -> list:
    result = streams_of(d, streams, horizon, rng)
    delta = float(d.mean())
    promoted = int((result["first"] > 0).sum())
    when = result["first"][result["first"] > 0]
    return [case, f"{delta:+.4f}", f"{float(np.clip(d, -OLD_CLIP, OLD_CLIP).mean()):+.4f}",
            "harmful" if delta >= 0 else "better",
            interval(promoted, streams), f"{int(np.median(when))}" if len(when) else "-",
            interval(int(result["old"].sum()), streams)]


def real_pairs(streams: int, horizon: int, rng) -> list:
    rows = []
    for name in SETS:
        x_val, kind, y_val = load(name, "val")
        x_test, _, y_test = load(name, "test")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cal.ConvergenceWarning)
            champion = cal.create("temperature", {"input": kind}).fit(x_val, y_val).predict_proba(x_test)
            for method in CHALLENGERS:
                challenger = cal.create(method, {"input": kind}).fit(x_val, y_val).predict_proba(x_test)
                d = row_nll(challenger, y_test) - row_nll(champion, y_test)
                rows.append(row(f"{name}: {method} vs temperature", d, streams, horizon, rng))
                print(rows[-1], flush=True)
    return rows


def synthetic_population(n: int, share: float, target: float, rng) -> np.ndarray:
    """Row differences of a synthetic pair (see the module); only the label's probability enters
    the NLL, so each row is ``[p_label, 1 - p_label]`` with the label first."""
    labels = np.zeros(n, dtype=np.int64)
    p_y = rng.beta(2.0, 1.0, n)
    base = row_nll(np.column_stack([p_y, 1 - p_y]), labels)
    rare = rng.random(n) < share
    tiny = 10.0 ** -rng.uniform(2, 300, n)

    def difference(gap: float) -> np.ndarray:
        better = np.where(rare, tiny, 1 / (1 + np.exp(-(np.log(p_y) - np.log1p(-p_y) + gap))))
        return row_nll(np.column_stack([better, 1 - better]), labels) - base

    gap = brentq(lambda g: difference(g).mean() - target, 0.0, 20.0, xtol=1e-14)
    return difference(gap)


def synthetic_pairs(streams: int, horizon: int, rng) -> list:
    rows = []
    for share in (0.001, 0.01):
        for target in (0.001, 0.01):
            d = synthetic_population(100000, share, target, rng)
            rows.append(row(f"synthetic: rare share {share}, Delta {target:+}", d, streams, horizon, rng))
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    streams = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    horizon = int(sys.argv[2]) if len(sys.argv) > 2 else 50000
    rng = np.random.default_rng(35)
    start = time.perf_counter()
    rows = real_pairs(streams, horizon, rng) + synthetic_pairs(streams, horizon, rng)
    notes = (f"{streams} streams of {horizon} labels per row, alpha = {ALPHA}, the verdict read after every "
             f"label; {time.perf_counter() - start:.0f} s. *Delta*: the population's mean floored NLL "
             "difference (challenger - champion); *clipped*: the mean of clip(d, -5, 5) the old rule decided "
             "on. *promoted*: streams where the gate promoted within the horizon (for a harmful challenger "
             f"this must be at most alpha = {ALPHA}; for a better one it is the power), with the median "
             "label count at promotion; *old rule*: the same streams under the pre-#35 rule (CS on the "
             "clipped difference).\n\nCommand: `python benchmarks/promotion_validity.py "
             f"{streams} {horizon}`")
    write("promotion_validity", "Promotion validity: harmful promotions under the floored, unclipped rule",
          ["pair", "Delta (NLL)", "clipped mean", "challenger", "promoted", "median labels", "old rule promoted"],
          rows, environment(["numpy", "scipy"]), notes)


if __name__ == "__main__":
    main()
