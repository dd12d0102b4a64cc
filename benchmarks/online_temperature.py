"""Online temperature scaling on drifting multiclass streams from real model outputs, side by side
with the uncalibrated model, a temperature fitted once on the first ``CALIBRATION`` rows, and a
temperature refitted every ``REFIT_EVERY`` rows on the last ``WINDOW`` labelled rows.

**Stream**: the validation and test rows of a set in a random order, logits (log-probabilities for
sets stored as probabilities, floored at 1e-12 as in ``online_platt.py``) multiplied by ``s_t``:
*gradual* from 1 to 3 over the stream, *abrupt* from 1 to 2.5 half-way (the model grows
over-confident). Every method forecasts each row before its label is used (prequential).

**Metrics** over the rows after the first ``CALIBRATION``: NLL, top-label ECE (15 equal-width
bins, the core's ``ece``) and Brier score; mean (sd) over ``REPEATS`` random orders.

Run: ``python benchmarks/online_temperature.py [repeats]`` (default 10; about two minutes);
results in benchmarks/results/online_temperature.md.
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
from benchmarks.online_platt import load
from calibration.online_temperature import OnlineTemperatureScaling

SETS = ["cifar10_resnet50_cross_entropy", "cifar100_densenet-bc-100", "cifar10_lenet5"]
CALIBRATION, REFIT_EVERY, WINDOW = 1000, 500, 2000
METHODS = ["base", "fixed TS", "windowed TS", "online TS"]


def stream(logits, labels, drift: str, rng) -> tuple[np.ndarray, np.ndarray]:
    order = rng.permutation(len(labels))
    position = np.linspace(0, 1, len(labels))
    scale = 1 + 2 * position if drift == "gradual" else np.where(position < 0.5, 1.0, 2.5)
    return logits[order] * scale[:, None], labels[order]


def windowed(z, y, first) -> np.ndarray:
    out = np.empty_like(z)
    out[:CALIBRATION] = first.predict_proba(z[:CALIBRATION])
    model = first
    for start in range(CALIBRATION, len(y), REFIT_EVERY):
        stop = min(start + REFIT_EVERY, len(y))
        out[start:stop] = model.predict_proba(z[start:stop])
        past = slice(max(0, stop - WINDOW), stop)
        model = cal.create("temperature").fit(z[past], y[past])
    return out


def forecasts(z, y) -> dict[str, np.ndarray]:
    fixed = cal.create("temperature").fit(z[:CALIBRATION], y[:CALIBRATION])
    return {"base": cal.softmax(z), "fixed TS": fixed.predict_proba(z), "windowed TS": windowed(z, y, fixed),
            "online TS": OnlineTemperatureScaling().predict_update(z, y)}


def metrics(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.array([cal.nll(p, y), cal.ece(p, y, n_bins=15), cal.brier(p, y)])


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    rng = np.random.default_rng(29)
    started = time.perf_counter()
    rows, update_seconds = [], []
    for name in SETS:
        logits, labels = load(name)
        for drift in ("gradual", "abrupt"):
            results = {method: [] for method in METHODS}
            for _ in range(repeats):
                z, y = stream(logits, labels, drift, rng)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    predicted = forecasts(z, y)
                for method, p in predicted.items():
                    results[method].append(metrics(p[CALIBRATION:], y[CALIBRATION:]))
            tick = time.perf_counter()
            OnlineTemperatureScaling().update(z, y)
            update_seconds.append((time.perf_counter() - tick) / len(y))
            for method in METHODS:
                values = np.array(results[method])
                mean, sd = values.mean(axis=0), values.std(axis=0)
                rows.append([name, drift, method, *(f"{m:.4f} ({s:.4f})" for m, s in zip(mean, sd, strict=True))])
            print(rows[-4:], flush=True)
    notes = (f"{repeats} random orders per row; fixed TS fitted on the first {CALIBRATION} rows; windowed TS refitted "
             f"every {REFIT_EVERY} rows on the last {WINDOW}; online TS with gamma 0.1, epsilon 1, 1/T in [0.01, 100], "
             f"starting at T = 1. One online update costs {1e6 * np.median(update_seconds):.1f} us a row (numpy per "
             f"row, one core; 10 and 100 classes). {time.perf_counter() - started:.0f} s in all.")
    write("online_temperature", "Online temperature scaling on drifting multiclass streams (real outputs)",
          ["set", "drift", "method", "NLL", "ECE (15 bins)", "Brier"], rows, environment(["numpy", "scipy"]), notes)


if __name__ == "__main__":
    main()
