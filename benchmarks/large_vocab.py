"""Temperature scaling, expectation consistency and ensemble TS fitted on float32 logits at LLM
vocabulary sizes, each timed against one log-softmax pass over the float64 logits in memory
(the floor: a fit needs at least one pass over the data), in interleaved rounds so that a slow
spell on a shared machine hits the fits and the floor alike; then each fit's tracemalloc peak as
a multiple of the float32 input's bytes. The ``metrics`` row times the eight metrics of a report
(ECE, MCE, adaptive ECE, classwise ECE, Brier, NLL, accuracy, mean confidence) together on the
float32 softmax of the same logits, its peak being the largest of the eight. A last table gives
the peaks of TS, EC, ETS and vector scaling on 50000 x 1000 float32 (vector scaling's peak is
reached in its first Newton iterations, so it is measured with ``max_iterations=3``).

    flock /tmp/cpu.lock .venv/bin/python -m benchmarks.large_vocab [--sizes 1024x50257,2048x32000] [--rounds 3]
        [--fits temperature,metrics]

The load average (1 minute) is printed before and after, in the environment line.

BLAS threads are left as the environment sets them (``OPENBLAS_NUM_THREADS``), printed in the
output's environment line."""

from __future__ import annotations

import argparse
import os
import statistics
import time
import tracemalloc
import warnings

import numpy as np

import calibration as cal
from benchmarks._common import environment, write

FITS = {
    "temperature": lambda z, y: cal.TemperatureScaling().fit(z, y),
    "expectation_consistency": lambda z, y: cal.ExpectationConsistency().fit(z, y),
    "ensemble_temperature": lambda z, y: cal.EnsembleTemperatureScaling().fit(z, y),
    "ensemble_temperature (nll)": lambda z, y: cal.EnsembleTemperatureScaling(loss="nll").fit(z, y),
}
METRICS = ("ece", "mce", "adaptive_ece", "classwise_ece", "brier", "nll", "accuracy", "mean_confidence")


def float32_softmax(z):
    """The softmax of float32 logits as float32 probabilities, a block of rows at a time."""
    p = np.empty_like(z)
    step = max(1, (1 << 20) // z.shape[1])
    for start in range(0, len(z), step):
        p[start:start + step] = cal.softmax(z[start:start + step].astype(np.float64)).astype(np.float32)
    return p


def all_metrics(p, y):
    return [getattr(cal, name)(p, y) for name in METRICS]


def log_softmax_pass(z):
    shifted = z - z.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def synthetic(n, k, seed=0):
    """float32 logits (3 N(0, 1)) and labels drawn from their softmax at temperature 2, a block of
    rows at a time (no n x k float64 array is made here)."""
    rng = np.random.default_rng(seed)
    z = np.empty((n, k), dtype=np.float32)
    labels = np.empty(n, dtype=np.int64)
    step = max(1, (1 << 20) // k)
    for start in range(0, n, step):
        block = (3.0 * rng.standard_normal((min(step, n - start), k))).astype(np.float32)
        e = np.exp(block.astype(np.float64) / 2.0)
        cumulative = (e / e.sum(axis=1, keepdims=True)).cumsum(axis=1)
        labels[start:start + len(block)] = (cumulative < rng.random(len(block))[:, None]).sum(axis=1).clip(0, k - 1)
        z[start:start + len(block)] = block
    return z, labels


def peak(fit, z, y) -> tuple[float, object]:
    tracemalloc.start()
    try:
        fitted = fit(z, y)
        return tracemalloc.get_traced_memory()[1] / z.nbytes, fitted
    finally:
        tracemalloc.stop()


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def vocabulary_rows(n, k, rounds, names=None):
    z, y = synthetic(n, k)
    names = [*FITS, "metrics"] if names is None else names
    p = float32_softmax(z) if "metrics" in names else None
    wide = z.astype(np.float64)  # the floor's input; not held during the peaks below
    work = {name: fit for name, fit in {**FITS, "metrics": lambda z, y: all_metrics(p, y)}.items() if name in names}
    ratios = {name: [] for name in work}
    seconds = {name: [] for name in work}
    bases = []
    for _ in range(rounds):
        for name, fit in work.items():
            base = timed(lambda w=wide: log_softmax_pass(w))
            elapsed = timed(lambda fit=fit: fit(z, y))
            bases.append(base)
            ratios[name].append(elapsed / base)
            seconds[name].append(elapsed)
    settled = min(timed(lambda w=wide: log_softmax_pass(w)) for _ in range(3))  # back to back: faults settle
    del wide
    rows = []
    for name, fit in work.items():
        if name == "metrics":
            ratio = max(peak(lambda z, y, m=m: getattr(cal, m)(p, y), z, y)[0] for m in METRICS)
            temperature = ""
        else:
            ratio, fitted = peak(fit, z, y)
            temperature = f"{fitted.temperature_:.12f}"
        r = ratios[name]
        rows.append([f"{n}x{k}", name, f"{statistics.median(r):.2f}x", f"{min(r):.2f}-{max(r):.2f}",
                     f"{statistics.median(seconds[name]):.2f}", f"{ratio:.2f}x", temperature])
    rows.append([f"{n}x{k}", "(log-softmax pass, float64)", "1.00x", "", f"{statistics.median(bases):.2f}", "", ""])
    rows.append([f"{n}x{k}", "(the same, best of 3 back to back)", "", "", f"{settled:.2f}", "", ""])
    return rows


def imagenet_peaks(n=50000, k=1000):
    z, y = synthetic(n, k)
    rows = []
    fits = {**FITS, "vector (max_iterations=3)": lambda z, y: cal.VectorScaling(max_iterations=3).fit(z, y)}
    for name, fit in fits.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cal.ConvergenceWarning)
            ratio, _ = peak(fit, z, y)
        rows.append([f"{n}x{k}", name, f"{ratio:.2f}x"])
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024x50257,2048x32000,8192x50257")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--name", default="large_vocab")
    parser.add_argument("--no-imagenet", dest="imagenet", action="store_false",
                        help="leave out the 50000 x 1000 peaks")
    parser.add_argument("--fits", help=f"comma-separated, of {', '.join([*FITS, 'metrics'])} (default all); "
                        "at 8192x50257 the floor alone holds 13 GB")
    args = parser.parse_args()
    names = args.fits.split(",") if args.fits else None
    if names is not None and not set(names) <= {*FITS, "metrics"}:
        parser.error(f"--fits: unknown {sorted(set(names) - {*FITS, 'metrics'})}")
    env = environment(["numpy", "scipy"])
    env["OPENBLAS_NUM_THREADS"] = os.environ.get("OPENBLAS_NUM_THREADS", "(default)")
    env["load average before"] = f"{os.getloadavg()[0]:.2f}"
    rows = []
    for size in args.sizes.split(","):
        n, k = (int(part) for part in size.split("x"))
        rows += vocabulary_rows(n, k, args.rounds, names)
    peaks = imagenet_peaks() if args.imagenet else []
    env["load average after"] = f"{os.getloadavg()[0]:.2f}"
    notes = ("Ratio: fit seconds over one log-softmax pass over the float64 logits, timed just before "
             f"it in the same round; median and range of {args.rounds} interleaved rounds. The floor's "
             "three n x k float64 temporaries are page-faulted afresh in most rounds; the 'best of 3 "
             "back to back' row is the same pass once the kernel has memory ready. Peak: "
             "tracemalloc's peak during one fit as a multiple of the float32 input's bytes (a float64 "
             "copy alone is 2x)."
             + ("\n\n| size | fit | peak / input bytes |\n|---|---|---|\n"
                + "\n".join(f"| {' | '.join(row)} |" for row in peaks) if peaks else ""))
    write(args.name, "Fits on float32 logits at large vocabularies", ["size", "fit", "time / floor", "range",
          "seconds", "peak / input bytes", "temperature"], rows, env, notes)


if __name__ == "__main__":
    main()
