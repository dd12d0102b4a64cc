"""Label-shift estimation and the suggested adjustment on real model outputs and synthetic data:
EM (Saerens et al. 2002) on plain temperature scaling against EM on bias-corrected temperature
scaling (BCTS, Alexandari et al. 2020) and BBSE (Lipton et al. 2018), and the NLL of the served
probabilities adjusted to ``calibration.prior_shift``'s suggestion (likelihood-ratio test at 0.05,
James-Stein shrinkage toward the source priors) against no adjustment, EM's raw estimate on
temperature scaling (what was served before) and the true priors (oracle).

Source: a temperature scaling (what the service stores and serves) and a BCTS (for the estimate
only) fitted on the validation split; its label frequencies are the source priors. A target set
of ``n`` rows (500, 1000, 5000) is drawn from the test split by class with shifted priors ``q``:
none (``q = pi``), Dirichlet (``q ~ Dir(1)``) or tweak-one (one random class gets ``rho``, the
others share the rest). Data sets: the 10- and 100-class sets of ../shared/data; cats against
dogs of CIFAR-10 ResNet-50 (classes 3 and 5, their two logits: a real 2-class model); and a
synthetic 2-class model, ``x | y ~ N(+-1, 1)``, logits ``(0, 2.5 x + 0.8)`` (over-confident and
biased; the Bayes logit is ``2x``).

Reported per cell over ``repetitions`` target sets: the mean L1 error of the estimated priors; the
mean NLL of the target's temperature-scaled probabilities without adjustment / adjusted to EM's
estimate on them / adjusted to the suggestion / adjusted to the true ``q``; the difference
suggestion - none, mean with its 95% t-interval and the largest over the sets; the share of the
oracle's gain the suggestion closes, ``(none - suggested) / (none - oracle)`` of the mean NLLs
with a 95% bootstrap interval over the sets (blank when the oracle gains under 0.005); the mean
shrinkage ``s`` and the share of sets where the test rejected.

Run: ``flock /tmp/cpu.lock python benchmarks/label_shift.py [repetitions]`` (default 40); results in
benchmarks/results/label_shift.md.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import t as student

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import calibration as cal
from benchmarks._common import environment, write
from calibration.label_shift import adjust_priors, bbse_priors, em_priors
from calibration.prior_shift import bcts_fit, prior_shift
from tests.helpers import load_split

DATASETS = ["synthetic 2-class", "cifar10_resnet50 cat/dog", "cifar10_resnet50_cross_entropy", "cifar10_lenet5",
            "cifar10_wrn16-4", "cifar100_densenet-bc-100"]
SHIFTS = [("none", 0.0), ("dirichlet", 1.0), ("tweak-one", 0.5), ("tweak-one", 0.9)]
SIZES = [500, 1000, 5000]


def as_logits(kind: str, values: np.ndarray) -> np.ndarray:
    return values.astype(np.float64) if kind == "logits" else np.log(np.clip(values, 1e-12, 1.0))


def synthetic(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, 2, n)
    x = rng.standard_normal(n) + np.where(labels == 1, 1.0, -1.0)
    return np.column_stack([np.zeros(n), 2.5 * x + 0.8]), labels


def splits(name: str, rng):
    """``(validation logits, labels, test logits, labels)``."""
    if name == "synthetic 2-class":
        return (*synthetic(rng, 5000), *synthetic(rng, 20000))
    if name.endswith("cat/dog"):
        out = []
        for split in ("val", "test"):
            kind, values, labels = load_split("cifar10_resnet50_cross_entropy", split)
            rows = np.flatnonzero((labels == 3) | (labels == 5))
            out += [as_logits(kind, values)[rows][:, [3, 5]], (labels[rows] == 5).astype(np.int64)]
        return tuple(out)
    kind, val, val_labels = load_split(name, "val")
    _, test, test_labels = load_split(name, "test")
    return as_logits(kind, val), val_labels, as_logits(kind, test), test_labels


def shifted_priors(rng, kind: str, size: float, pi: np.ndarray) -> np.ndarray:
    k = len(pi)
    if kind == "none":
        return pi.copy()
    if kind == "dirichlet":
        return rng.dirichlet(np.full(k, size))
    q = np.full(k, (1 - size) / (k - 1))
    q[rng.integers(k)] = size
    return q


def nll(probs: np.ndarray, labels: np.ndarray) -> float:
    return float(-np.log(np.clip(probs[np.arange(len(labels)), labels], 1e-300, 1.0)).mean())


def mean_interval(values: np.ndarray) -> str:
    half = student.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    return f"{values.mean():+.4f} [{values.mean() - half:+.4f}, {values.mean() + half:+.4f}]"


def gap_closed(rng, none: np.ndarray, suggested: np.ndarray, oracle: np.ndarray) -> str:
    if none.mean() - oracle.mean() < 0.005:
        return ""
    picks = rng.integers(0, len(none), (2000, len(none)))
    ratios = (none[picks].mean(1) - suggested[picks].mean(1)) / (none[picks].mean(1) - oracle[picks].mean(1))
    low, high = np.percentile(ratios, [2.5, 97.5])
    return f"{(none.mean() - suggested.mean()) / (none.mean() - oracle.mean()):.0%} [{low:.0%}, {high:.0%}]"


def cell(rng, data, shift: str, size: float, n: int, repetitions: int) -> dict:
    val_labels, test_labels, served, bcts_probs, source, pi, by_class = data
    out = {key: [] for key in ("l1 ts", "l1 bcts", "l1 bbse", "none", "em ts", "suggested", "oracle", "shrinkage",
                               "rejected")}
    for _ in range(repetitions):
        q = shifted_priors(rng, shift, size, pi)
        counts = rng.multinomial(n, q)
        rows = np.concatenate([rng.choice(by_class[c], size=m) for c, m in enumerate(counts) if m])
        probs, labels = served[rows], test_labels[rows]
        em_ts = em_priors(probs, pi, tol=1e-7).priors
        decision = prior_shift(bcts_probs[rows], pi, tol=1e-7)
        out["l1 ts"].append(np.abs(em_ts - q).sum())
        out["l1 bcts"].append(np.abs(decision.estimate - q).sum())
        out["l1 bbse"].append(np.abs(bbse_priors(source, val_labels, probs, pi).priors - q).sum())
        out["none"].append(nll(probs, labels))
        out["em ts"].append(nll(adjust_priors(probs, pi, em_ts), labels))
        out["suggested"].append(nll(adjust_priors(probs, pi, decision.suggested), labels))
        out["oracle"].append(nll(adjust_priors(probs, pi, q), labels))
        out["shrinkage"].append(decision.shrinkage)
        out["rejected"].append(decision.p_value < decision.alpha)
    return {key: np.asarray(values, dtype=np.float64) for key, values in out.items()}


def main():
    repetitions = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    rng = np.random.default_rng(2020)
    rows, worst = [], -np.inf
    started = time.perf_counter()
    for name in DATASETS:
        val, val_labels, test, test_labels = splits(name, rng)
        temperature = cal.create("temperature", {"input": "logits"}).fit(val, val_labels)
        bcts = bcts_fit(val, val_labels)
        k = val.shape[1]
        pi = np.bincount(val_labels, minlength=k) / len(val_labels)
        data = (val_labels, test_labels, temperature.predict_proba(test), bcts.predict_proba(test),
                temperature.predict_proba(val), pi, [np.flatnonzero(test_labels == c) for c in range(k)])
        for shift, size in SHIFTS:
            for n in SIZES:
                r = cell(rng, data, shift, size, n, repetitions)
                difference = r["suggested"] - r["none"]
                worst = max(worst, difference.mean())
                rows.append([name, k, shift if shift == "none" else f"{shift} {size}", n,
                             " / ".join(f"{r[key].mean():.3f}" for key in ("l1 ts", "l1 bcts", "l1 bbse")),
                             " / ".join(f"{r[key].mean():.3f}" for key in ("none", "em ts", "suggested", "oracle")),
                             mean_interval(difference), f"{difference.max():+.3f}",
                             gap_closed(rng, r["none"], r["suggested"], r["oracle"]),
                             f"{r['shrinkage'].mean():.2f}", f"{r['rejected'].mean():.2f}"])
                print(rows[-1], flush=True)
    notes = (f"Command: `flock /tmp/cpu.lock python benchmarks/label_shift.py {repetitions}`. "
             f"{repetitions} target sets per cell ({time.perf_counter() - started:.0f} s in all). Largest mean "
             f"difference (suggested - none) over the cells: {worst:+.4f} nats. NLL: probabilities floored at 1e-300, "
             "so a class a prior estimate sends to 0 shows (EM on TS, raw). The served probabilities are the "
             "temperature scaling's (as stored); BCTS is fitted only for the estimate and the test.")
    write("label_shift", "Label shift: EM on TS vs EM on BCTS vs BBSE, and the suggested (tested, shrunk) adjustment",
          ["data set", "k", "shift", "n target", "prior L1 error EM(TS) / EM(BCTS) / BBSE",
           "NLL none / EM(TS) / suggested / oracle", "suggested - none, mean [95% CI]", "worst set",
           "oracle gap closed [95% CI]", "mean shrinkage s", "test rejected"], rows,
          environment(["numpy", "scipy"]), notes)


if __name__ == "__main__":
    main()
