"""Dirichlet calibration with ODIR at k = 100: ours against dirichletcal on the same objective.

For each CIFAR-100 validation set (5000 x 100, stored as float32 probabilities) the features
are ``x = log(max(p, 1e-12))`` in float64; ours is fitted on ``x`` as logits (its features are
``log_softmax(x)``), dirichletcal's ``FullDirichletCalibrator`` on ``q = softmax(x)`` (so that
its ``log q`` is the same ``log_softmax(x)``; ``q ≥ 1e-12`` is never clipped). Same objective:
dirichletcal with ``reg_norm=True, ref_row=False`` minimises
``mean NLL + λ/(k(k-1)) Σ_{i≠j} W_ij² + μ/k Σ b_j²``, ours' ODIR objective (its NLL clips a
label probability below 2.2e-16, which no fit here reaches). Its default reference-row
parametrisation (last row of W fixed at 0) penalises a different representative of the same
map, i.e. another objective; and for k > 36 it uses L-BFGS-B (``factr=1``), here too.

Reported per fit: seconds (one fit each, in the same process, one after the other), the
1-minute load average just before it (a 2-core machine shared with other work), solver
iterations, ours' Hessian-vector products, whether it converged (ours: its own report, largest
gradient entry ≤ 1e-6 in standardised coordinates; dirichletcal: L-BFGS-B's warnflag = 0), the
largest entry of the objective's gradient in (W, b) and the objective itself, both computed
here by one formula for both, and train/test NLL.

Run: ``flock /tmp/calib-bench.lock .venv/bin/python benchmarks/dirichlet_k100.py [λ ...]``
(λ = μ; default 1). dirichletcal 0.5.3 needs jax (see benchmarks/README.md).
"""

from __future__ import annotations

import os
import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.optimize

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import calibration as cal
from benchmarks._common import environment, write

DATA = Path("/work/shared/data") if Path("/work/shared/data").exists() else Path("../shared/data")
SETS = ["cifar100_wrn16-4", "cifar100_densenet-bc-100"]


def features(split: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    data = np.load(DATA / f"{name}_{split}.npz")
    return np.log(np.maximum(data["probs"].astype(np.float64), 1e-12)), data["labels"]


def log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def objective(weights, bias, f, y, lam, mu) -> tuple[float, float, float]:
    """ODIR objective of softmax(f Wᵀ + b), the largest entry of its gradient, and the NLL."""
    n, k = f.shape
    out = log_softmax(f @ weights.T + bias)
    nll = -float(np.mean(out[np.arange(n), y]))
    off = ~np.eye(k, dtype=bool)
    value = nll + lam / (k * (k - 1)) * float(np.sum(weights[off] ** 2)) + mu / k * float(bias @ bias)
    r = np.exp(out)
    r[np.arange(n), y] -= 1.0
    grad_w = r.T @ f / n + 2 * lam / (k * (k - 1)) * np.where(off, weights, 0.0)
    grad_b = r.mean(axis=0) + 2 * mu / k * bias
    return value, float(max(np.abs(grad_w).max(), np.abs(grad_b).max())), nll


def test_nll(weights, bias, f, y) -> float:
    return -float(np.mean(log_softmax(f @ weights.T + bias)[np.arange(len(y)), y]))


def ours(x, y, lam):
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cal.ConvergenceWarning)
        fit = cal.create("dirichlet", {"off_diagonal_l2": lam, "bias_l2": lam}).fit(x, y)
    seconds = time.perf_counter() - start
    d = fit.diagnostics_
    return seconds, d.iterations, d.converged, fit.weights_, fit.bias_, d.message


def dirichletcal(x, y, lam):
    from dirichletcal import FullDirichletCalibrator

    info = {}
    original = scipy.optimize.fmin_l_bfgs_b

    def recording(*args, **kwargs):
        result = original(*args, **kwargs)
        info.update(result[2])
        return result

    scipy.optimize.fmin_l_bfgs_b = recording
    try:
        q = np.exp(log_softmax(x))
        start = time.perf_counter()
        model = FullDirichletCalibrator(reg_lambda=lam, reg_mu=lam, reg_norm=True, ref_row=False).fit(q, y)
        seconds = time.perf_counter() - start
    finally:
        scipy.optimize.fmin_l_bfgs_b = original
    weights = np.asarray(model.calibrator_.weights_, dtype=np.float64)
    return (seconds, info.get("nit"), info.get("warnflag") == 0, weights[:, :-1], weights[:, -1],
            str(info.get("task", "")))


def main() -> None:
    lams = [float(a) for a in sys.argv[1:]] or [1.0]
    rows = []
    for name in SETS:
        x, y = features("val", name)
        x_test, y_test = features("test", name)
        f, f_test = log_softmax(x), log_softmax(x_test)
        for lam in lams:
            times = {}
            for label, run in (("ours: dirichlet ODIR (trust-region Newton-CG, class-block preconditioner)", ours),
                               ("dirichletcal FullDirichletCalibrator (L-BFGS-B)", dirichletcal)):
                load = os.getloadavg()[0]
                seconds, iterations, converged, weights, bias, message = run(x, y, lam)
                value, gradient, nll = objective(weights, bias, f, y, lam, lam)
                times[label] = seconds
                products = re.search(r"\((\d+) Hessian-vector products\)", message)
                rows.append([name, f"{lam:g}", label, f"{seconds:.1f}", f"{load:.1f}", iterations,
                             products.group(1) if products else "", converged, f"{gradient:.2e}",
                             f"{value:.8f}", f"{nll:.6f}", f"{test_nll(weights, bias, f_test, y_test):.4f}"])
                print(rows[-1], message, flush=True)
            ours_seconds, their_seconds = times.values()
            rows.append([name, f"{lam:g}", "ratio dirichletcal / ours", f"{their_seconds / ours_seconds:.3g}",
                         "", "", "", "", "", "", "", ""])
            write_table(rows)  # after every pair, so that a run cut short keeps what it measured


def write_table(rows: list[list]) -> None:
    env = environment(["numpy", "scipy", "jax", "dirichletcal"])
    write("dirichlet_k100", "Dirichlet-ODIR at k = 100 (CIFAR-100, 5000 x 100 validation sets)",
          ["set", "λ = μ", "implementation", "seconds", "load before", "iterations", "Hessian-vector products",
           "converged", "max |gradient|", "objective", "train NLL", "test NLL"], rows, env,
          notes=__doc__.split("\n\n", 1)[1].split("\n\nRun:")[0])


if __name__ == "__main__":
    main()
