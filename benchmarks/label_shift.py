"""Label-shift estimation and adaptation on real model outputs (issue #20): EM (Saerens et al.
2002) on temperature-scaled probabilities against BBSE (Lipton et al. 2018, hard confusion
matrix), as in Alexandari et al. (ICML 2020).

For each data set a temperature scaling is fitted on the validation split (the source: its label
frequencies are the source priors, its calibrated predictions give BBSE's confusion matrix). A
target set of ``n`` rows is drawn from the test split with shifted priors ``q``: Dirichlet
(``q ~ Dir(a * 1)``, a = 1 and 0.1) or "tweak-one" (one random class gets ``rho``, the others share
the rest). Reported, as the mean over ``repetitions`` target sets: the L1 error of the estimated
priors, and the NLL and 15-bin ECE of the target's calibrated probabilities without adaptation,
adapted to the EM and BBSE estimates (``adjust_priors``), and adapted to the true ``q`` (oracle).

Run: ``python benchmarks/label_shift.py [repetitions]`` (default 20); results in
benchmarks/results/label_shift.md.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import calibration as cal
from benchmarks._common import environment, write
from calibration.label_shift import adjust_priors, bbse_priors, em_priors
from tests.helpers import load_split

DATASETS = ["cifar10_resnet50_cross_entropy", "cifar10_lenet5", "cifar10_wrn16-4", "cifar100_densenet-bc-100"]
SHIFTS = [("dirichlet", 1.0), ("dirichlet", 0.1), ("tweak-one", 0.5), ("tweak-one", 0.9)]
SIZES = [1000, 10000]


def as_logits(kind: str, values: np.ndarray) -> np.ndarray:
    return values.astype(np.float64) if kind == "logits" else np.log(np.clip(values, 1e-12, 1.0))


def shifted_priors(rng, kind: str, size: float, k: int) -> np.ndarray:
    if kind == "dirichlet":
        return rng.dirichlet(np.full(k, size))
    q = np.full(k, (1 - size) / (k - 1))
    q[rng.integers(k)] = size
    return q


def main():
    repetitions = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    rng = np.random.default_rng(2020)
    rows = []
    started = time.perf_counter()
    for name in DATASETS:
        kind, val, val_labels = load_split(name, "val")
        _, test, test_labels = load_split(name, "test")
        calibrator = cal.create("temperature", {"input": "logits"}).fit(as_logits(kind, val), val_labels)
        source = calibrator.predict_proba(as_logits(kind, val))
        target_all = calibrator.predict_proba(as_logits(kind, test))
        k = source.shape[1]
        pi = np.bincount(val_labels, minlength=k) / len(val_labels)
        by_class = [np.flatnonzero(test_labels == c) for c in range(k)]
        for shift, size in SHIFTS:
            for n in SIZES:
                results = {key: [] for key in ("em", "bbse", "nll none", "nll em", "nll bbse", "nll oracle",
                                               "ece none", "ece em", "ece bbse", "ece oracle")}
                for _ in range(repetitions):
                    q = shifted_priors(rng, shift, size, k)
                    counts = rng.multinomial(n, q)
                    picked = np.concatenate([rng.choice(by_class[c], size=m) for c, m in enumerate(counts) if m])
                    probs, labels = target_all[picked], test_labels[picked]
                    em = em_priors(probs, pi, tol=1e-7).priors
                    bbse = bbse_priors(source, val_labels, probs, pi).priors
                    results["em"].append(np.abs(em - q).sum())
                    results["bbse"].append(np.abs(bbse - q).sum())
                    for label, adapted in (("none", probs), ("em", adjust_priors(probs, pi, em)),
                                           ("bbse", adjust_priors(probs, pi, bbse)),
                                           ("oracle", adjust_priors(probs, pi, q))):
                        results[f"nll {label}"].append(cal.nll(np.clip(adapted, 1e-300, 1), labels))
                        results[f"ece {label}"].append(cal.ece(adapted, labels))
                mean = {key: float(np.mean(values)) for key, values in results.items()}
                median = {key: float(np.median(values)) for key, values in results.items()}
                rows.append([name, f"{shift} {size}", n, f"{mean['em']:.3f}", f"{mean['bbse']:.3f}",
                             " / ".join(f"{mean[f'nll {x}']:.3f}" for x in ("none", "em", "bbse", "oracle")),
                             " / ".join(f"{median[f'nll {x}']:.3f}" for x in ("none", "em", "bbse", "oracle")),
                             " / ".join(f"{mean[f'ece {x}']:.4f}" for x in ("none", "em", "bbse", "oracle"))])
                print(rows[-1], flush=True)
    notes = (f"Means over {repetitions} target sets per row ({time.perf_counter() - started:.0f} s in all), and the "
             "median NLL. Prior error: L1 distance to the sampling priors q. NLL and ECE (15 bins) of the target's "
             "temperature-scaled probabilities: without adaptation / adapted to the EM estimate / to the BBSE "
             "estimate / to the true q. An estimate that gives a class present in the target a prior of 0 (BBSE "
             "clips its weights at 0; EM can converge there on small sets) gives its rows probability 0: the "
             "NLL (probabilities floored at 1e-300) of that set is then huge, which the mean shows and the "
             "median does not. Temperature scaling here is plain (no bias terms): Alexandari et al.'s BCTS "
             "would help EM further.")
    write("label_shift", "Label shift: EM (Saerens 2002) vs BBSE (Lipton 2018) on temperature-scaled outputs",
          ["data set", "shift", "n target", "EM prior L1 error", "BBSE prior L1 error",
           "NLL none / EM / BBSE / oracle", "median NLL none / EM / BBSE / oracle",
           "ECE none / EM / BBSE / oracle"], rows,
          environment(["numpy", "scipy"]), notes)


if __name__ == "__main__":
    main()
