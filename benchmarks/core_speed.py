"""Fit speed of the numeric core against peers, in one run.

* Fits as multiples of one log-softmax pass (issue #23 item 6): TS, EC and ETS (mse) on
  50000 x 1000 float32 logits, each timed against ``log_softmax`` of the same array within each
  of several interleaved rounds (the fastest of 3 calls of each; median and range of the
  per-round ratios), and the peak of
  memory allocated during each fit (tracemalloc, which sees numpy's buffers) as a multiple of
  the input's bytes. Targets: TS <= 4, EC <= 5, ETS <= 8 passes; ETS peak <= 2.5x the input.
* TS and EC on n x k float32 logits, as multiples of one numpy max-shifted softmax pass over the
  same array: ours; netcal's TemperatureScaling; the usual torch LBFGS recipe (lr=0.01,
  max_iter=50, T0=1.5); scipy's bounded Brent on the NLL (bounds 0.05..20); a plain numpy
  Newton iteration on 1/T (full passes, no blocking). The fitted T of each is listed.
* Dirichlet with ODIR (λ = μ = 1e-3) on 5000 x 10: ours vs dirichletcal's FullDirichletCalibrator.
* IRM on 50000 x 100: ours vs ``argsort + PAVA`` on the 5M pooled points (scipy's PAVA) and
  scikit-learn's IsotonicRegression.

Run: ``python benchmarks/core_speed.py`` (in the environment of benchmarks/README.md);
``python benchmarks/core_speed.py --passes [rounds]`` runs only the pass multiples (the
project's own environment is enough).
"""

from __future__ import annotations

import statistics
import sys
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
from scipy.optimize import isotonic_regression, minimize_scalar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import calibration as cal
from benchmarks._common import best_of, environment, write


def softmax_pass(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def log_softmax_pass(z):
    shifted = z - z.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


PASS_FITS = {
    "temperature": (lambda z, y: cal.TemperatureScaling().fit(z, y), 4),
    "expectation_consistency": (lambda z, y: cal.ExpectationConsistency().fit(z, y), 5),
    "ensemble_temperature": (lambda z, y: cal.EnsembleTemperatureScaling().fit(z, y), 8),
}


def pass_rows(n=50000, k=1000, rounds=5):
    """Each fit's time over one log-softmax pass timed in the same round (the rounds interleave
    the fits, so that a slow spell on a shared machine hits all alike), then its peak memory."""
    z, y = synthetic(n, k)
    ratios = {name: [] for name in PASS_FITS}
    seconds = {name: [] for name in PASS_FITS}
    bases = []
    for fit, _ in PASS_FITS.values():
        fit(z, y)  # warm-up
    for _ in range(rounds):
        for name, (fit, _) in PASS_FITS.items():
            base = best_of(lambda: log_softmax_pass(z), repeat=3, warmup=0)
            elapsed = best_of(lambda fit=fit: fit(z, y), repeat=3, warmup=0)
            bases.append(base)
            ratios[name].append(elapsed / base)
            seconds[name].append(elapsed)
    rows = []
    for name, (fit, target) in PASS_FITS.items():
        tracemalloc.start()
        fitted = fit(z, y)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        r = ratios[name]
        rows.append([f"{n}x{k}", name, f"{statistics.median(r):.2f}x", f"{min(r):.2f}-{max(r):.2f}",
                     f"<= {target}", f"{statistics.median(seconds[name]) * 1e3:.0f}",
                     f"{peak / z.nbytes:.2f}x", f"{fitted.temperature_:.12f}"])
    rows.append([f"{n}x{k}", "(one log-softmax pass)", "1.00x", "", "",
                 f"{statistics.median(bases) * 1e3:.0f}", "", ""])
    return rows


def synthetic(n, k, seed=0):
    rng = np.random.default_rng(seed)
    z = (3.0 * rng.standard_normal((n, k))).astype(np.float32)
    p = softmax_pass(z.astype(np.float64) / 2.0)
    labels = (p.cumsum(axis=1) < rng.random(n)[:, None]).sum(axis=1).clip(0, k - 1)
    return z, labels


def scipy_brent(z, y):
    z64 = z.astype(np.float64)

    def nll(t):
        s = z64 / t
        m = s.max(axis=1)
        return float(np.mean(m + np.log(np.exp(s - m[:, None]).sum(axis=1)) - s[np.arange(len(y)), y]))

    return minimize_scalar(nll, bounds=(0.05, 20), method="bounded").x


def plain_newton(z, y, tol=1e-10):
    z64 = z.astype(np.float64)
    d = z64 - z64.max(axis=1, keepdims=True)
    dy = d[np.arange(len(y)), y]
    beta = 1.0
    for _ in range(100):
        e = np.exp(beta * d)
        s0 = e.sum(axis=1)
        m1 = (e * d).sum(axis=1) / s0
        m2 = (e * d * d).sum(axis=1) / s0
        g, h = np.mean(m1 - dy), np.mean(m2 - m1**2)
        step = g / h
        beta -= step
        if abs(step) < tol * beta:
            break
    return 1 / beta


def torch_lbfgs(z, y):
    import torch

    logits, labels = torch.from_numpy(z), torch.from_numpy(y)
    temperature = torch.nn.Parameter(torch.ones(1) * 1.5)
    optimizer = torch.optim.LBFGS([temperature], lr=0.01, max_iter=50)
    loss_fn = torch.nn.CrossEntropyLoss()

    def closure():
        optimizer.zero_grad()
        loss = loss_fn(logits / temperature, labels)
        loss.backward()
        return loss

    optimizer.step(closure)
    return float(temperature.item())


def netcal_ts(z, y):
    from netcal.scaling import TemperatureScaling

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = TemperatureScaling(detection=False, use_cuda=False)
        model.fit(softmax_pass(z), y)  # netcal takes probabilities
    return float(1.0 / np.asarray(model.weights).ravel()[0])


def temperature_rows(sizes, repeat):
    rows = []
    for n, k in sizes:
        z, y = synthetic(n, k)
        base = best_of(lambda z=z: softmax_pass(z), repeat)
        candidates = [
            ("ours: temperature", lambda z, y: cal.TemperatureScaling().fit(z, y).temperature_),
            ("ours: expectation_consistency", lambda z, y: cal.ExpectationConsistency().fit(z, y).temperature_),
            ("plain Newton on 1/T", plain_newton),
            ("scipy bounded Brent (0.05, 20)", scipy_brent),
            ("torch LBFGS recipe", torch_lbfgs),
            ("netcal TemperatureScaling", netcal_ts),
        ]
        for name, fit in candidates:
            try:
                t = fit(z, y)
                seconds = best_of(lambda fit=fit, z=z, y=y: fit(z, y), warmup=0,
                                  repeat=max(1, repeat // 2) if "netcal" in name else repeat)
                rows.append([f"{n}x{k}", name, f"{seconds / base:.2f}x", f"{seconds * 1e3:.1f}", f"{t:.10f}"])
            except Exception as exc:
                rows.append([f"{n}x{k}", name, "failed", "", type(exc).__name__])
        rows.append([f"{n}x{k}", "(one softmax pass)", "1.00x", f"{base * 1e3:.1f}", ""])
    return rows


def dirichlet_rows():
    z, y = synthetic(5000, 10, seed=1)
    rows = []
    seconds = best_of(lambda: cal.DirichletCalibration(off_diagonal_l2=1e-3, bias_l2=1e-3).fit(z, y), 3)
    ours = cal.DirichletCalibration(off_diagonal_l2=1e-3, bias_l2=1e-3).fit(z, y)
    rows.append(["ours: dirichlet ODIR", f"{seconds:.3f}", f"{cal.nll(ours.predict_proba(z), y):.6f}"])
    try:
        from dirichletcal import FullDirichletCalibrator

        p = softmax_pass(z.astype(np.float64))
        model = FullDirichletCalibrator(reg_lambda=1e-3, reg_mu=1e-3)
        seconds = best_of(lambda: model.fit(p, y), 1, warmup=0)
        rows.append(["dirichletcal FullDirichletCalibrator ODIR", f"{seconds:.3f}",
                     f"{cal.nll(model.predict_proba(p), y):.6f}"])
    except ImportError:
        rows.append(["dirichletcal", "not installed", ""])
    return rows


def isotonic_rows(repeat):
    from sklearn.isotonic import IsotonicRegression

    z, y = synthetic(50000, 100, seed=2)
    p = softmax_pass(z.astype(np.float64))
    flat = p.ravel()
    target = np.zeros(p.shape)
    target[np.arange(len(y)), y] = 1.0
    target = target.ravel()

    def argsort_pava():
        order = np.argsort(flat)
        return isotonic_regression(target[order]).x

    base = best_of(argsort_pava, repeat)
    rows = [["argsort + PAVA (5M points)", "1.00x", f"{base:.3f}"]]
    ours = best_of(lambda: cal.IsotonicMulticlass(input="probabilities").fit(p, y), repeat)
    rows.append(["ours: isotonic_multiclass fit", f"{ours / base:.2f}x", f"{ours:.3f}"])
    sk = best_of(lambda: IsotonicRegression(out_of_bounds="clip").fit(flat, target), 1, warmup=0)
    rows.append(["scikit-learn IsotonicRegression fit", f"{sk / base:.2f}x", f"{sk:.3f}"])
    return rows


def main():
    env = environment(["numpy", "scipy", "torch", "netcal", "scikit-learn"])
    if "--passes" in sys.argv:
        tail = sys.argv[sys.argv.index("--passes") + 1:]
        rounds = int(tail[0]) if tail else 5
    else:
        rounds = 5
    write("core_passes", "TS, EC and ETS fits on float32 logits as multiples of one log-softmax pass",
          ["n x k", "method", "time / pass (median)", "range", "target", "ms", "peak / input bytes", "T"],
          pass_rows(rounds=rounds), env,
          f"Median and range over {rounds} interleaved rounds; each ratio is against a log-softmax pass "
          "(float32, numpy) timed just before the fit, each the fastest of 3 calls in the round. "
          "Peak: tracemalloc's peak during one fit (the float64 copy of the input included) over the "
          "float32 input's bytes.")
    if "--passes" in sys.argv:
        return
    quick = "--quick" in sys.argv
    sizes = [(50000, 1000), (50000, 100), (50000, 10)] if not quick else [(5000, 100)]
    repeat = 5 if not quick else 2
    write("core_temperature", "Temperature scaling and EC fits on float32 logits",
          ["n x k", "method", "time / softmax pass", "ms", "T"], temperature_rows(sizes, repeat), env,
          "T* to compare: the exact optimum zeroes the NLL derivative; netcal on float32 returns 1.0.")
    write("core_dirichlet", "Dirichlet calibration with ODIR (λ = μ = 1e-3) on 5000 x 10",
          ["implementation", "seconds", "train NLL"], dirichlet_rows(), env)
    write("core_isotonic", "IRM fit on 50000 x 100 (5M pooled points)",
          ["implementation", "time / (argsort + PAVA)", "seconds"], isotonic_rows(repeat), env)


if __name__ == "__main__":
    main()
