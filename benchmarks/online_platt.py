"""Online Platt scaling on drifting binary streams from real model outputs, the shape of Gupta &
Ramdas' experiments (ICML 2023, section 5): OPS and its tracking calibeater (TOPS) against the
uncalibrated base model, a Platt fit on the first ``CALIBRATION`` rows kept fixed, and a Platt
refit every ``REFIT_EVERY`` rows on the last ``WINDOW`` labelled rows.

**Stream**: the validation and test rows of a multiclass set in a random order; the binary event
is "the top-1 prediction is correct", its base score the log-odds of the top-1 confidence of
``softmax(s_t z)``, where the logit scale ``s_t`` drifts: *gradual* from 1 to 3 over the stream, or
*abrupt* from 1 to 2.5 half-way (the model grows over-confident, as after a retraining or a data
change upstream). Every method forecasts each row before its label is used (prequential).

**Metrics** (over the rows after the first ``CALIBRATION``, the paper's): Brier score; the
calibration error ``sum_b (n_b / n) |mean forecast_b - mean label_b|`` and the sharpness
``sum_b (n_b / n) (mean label_b - mean label)^2`` over 10 equal-width forecast bins (Murphy's
decomposition: Brier = reliability - sharpness + uncertainty); and the log loss. Mean (sd) over
``REPEATS`` random orders.

Run: ``python benchmarks/online_platt.py [repeats]`` (default 20; about a minute); results in
benchmarks/results/online_platt.md.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import calibration as cal
from benchmarks._common import environment, write

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SETS = ["cifar10_lenet5", "cifar100_densenet-bc-100", "cifar10_resnet50_cross_entropy"]
CALIBRATION, REFIT_EVERY, WINDOW, BINS = 1000, 500, 2000, 10
METHODS = ["base", "fixed Platt", "windowed Platt", "OPS", "TOPS"]


def load(name: str) -> np.ndarray:
    parts = []
    labels = []
    for split in ("val", "test"):
        with np.load(DATA / f"{name}_{split}.npz") as data:
            parts.append(data["logits"] if "logits" in data else np.log(np.clip(data["probs"], 1e-12, 1)))
            labels.append(data["labels"])
    return np.concatenate(parts).astype(np.float64), np.concatenate(labels)


def stream(logits, labels, drift: str, rng) -> tuple[np.ndarray, np.ndarray]:
    order = rng.permutation(len(labels))
    z, y = logits[order], labels[order]
    position = np.linspace(0, 1, len(y))
    scale = 1 + 2 * position if drift == "gradual" else np.where(position < 0.5, 1.0, 2.5)
    log_p = cal.log_softmax(z * scale[:, None])
    top = log_p.argmax(axis=1)
    log_confidence = log_p[np.arange(len(y)), top]
    score = log_confidence - np.log(-np.expm1(np.minimum(log_confidence, -1e-15)))  # log(c / (1 - c))
    return score, (top == y).astype(np.int64)


def windowed(scores, labels) -> np.ndarray:
    out = np.empty(len(scores))
    model = cal.create("platt", {"input": "scores"}).fit(scores[:CALIBRATION], labels[:CALIBRATION])
    out[:CALIBRATION] = 1 / (1 + np.exp(-scores[:CALIBRATION]))
    for start in range(CALIBRATION, len(scores), REFIT_EVERY):
        stop = min(start + REFIT_EVERY, len(scores))
        out[start:stop] = model.predict_proba(scores[start:stop])[:, 1]
        past = slice(max(0, stop - WINDOW), stop)
        model = cal.create("platt", {"input": "scores"}).fit(scores[past], labels[past])
    return out


def forecasts(scores, labels) -> dict[str, np.ndarray]:
    base = 1 / (1 + np.exp(-scores))
    fixed = cal.create("platt", {"input": "scores"}).fit(scores[:CALIBRATION], labels[:CALIBRATION])
    ops = cal.OnlinePlattScaling().predict_update(scores, labels)
    return {"base": base, "fixed Platt": fixed.predict_proba(scores)[:, 1], "windowed Platt": windowed(scores, labels),
            "OPS": ops, "TOPS": cal.TrackingCalibeater(BINS).predict_update(ops, labels)}


def metrics(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    bins = np.clip(np.ceil(p * BINS).astype(int) - 1, 0, BINS - 1)
    counts = np.bincount(bins, minlength=BINS)
    filled = counts > 0
    mean_p = np.bincount(bins, p, BINS)[filled] / counts[filled]
    mean_y = np.bincount(bins, y, BINS)[filled] / counts[filled]
    weights = counts[filled] / len(y)
    return np.array([np.mean((p - y) ** 2), np.sum(weights * np.abs(mean_p - mean_y)),
                     np.sum(weights * (mean_y - y.mean()) ** 2),
                     -np.mean(y * np.log(p) + (1 - y) * np.log1p(-p))])


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    rng = np.random.default_rng(23)
    started = time.perf_counter()
    rows = []
    update_seconds = []
    for name in SETS:
        logits, labels = load(name)
        for drift in ("gradual", "abrupt"):
            results = {method: [] for method in METHODS}
            for _ in range(repeats):
                scores, correct = stream(logits, labels, drift, rng)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    predicted = forecasts(scores, correct)
                for method, p in predicted.items():
                    results[method].append(metrics(p[CALIBRATION:], correct[CALIBRATION:]))
            tick = time.perf_counter()
            cal.OnlinePlattScaling().update(scores, correct)
            update_seconds.append((time.perf_counter() - tick) / len(scores))
            for method in METHODS:
                values = np.array(results[method])
                mean, sd = values.mean(axis=0), values.std(axis=0)
                rows.append([name, drift, method, *(f"{m:.4f} ({s:.4f})" for m, s in zip(mean, sd, strict=True))])
            print(rows[-5:], flush=True)
    notes = (f"{repeats} random orders per row; fixed Platt fitted on the first {CALIBRATION} rows; windowed Platt "
             f"refitted every {REFIT_EVERY} rows on the last {WINDOW}; OPS with gamma 0.1, epsilon 1, radius 100; "
             f"TOPS tracks OPS in {BINS} bins. One OPS update costs {1e6 * np.median(update_seconds):.1f} us a row "
             f"(pure Python, one core). {time.perf_counter() - started:.0f} s in all.")
    write("online_platt", "Online Platt scaling on drifting binary streams (real outputs)",
          ["set", "drift", "method", "Brier", "calibration error", "sharpness", "log loss"], rows,
          environment(["numpy", "scipy"]), notes)


if __name__ == "__main__":
    main()
