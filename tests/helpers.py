"""Shared test data: the reference input of ../shared/reference, the real model outputs, and
the synthetic binary model of Mix-n-Match (used by tests and benchmarks/kde_ece_accuracy.py)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from scipy.special import expit, softmax

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CALIBRATION_SHARED_DIR", REPO.parent / "shared"))
DATA = SHARED / "data"

DATASETS = [
    "cifar10_resnet50_cross_entropy",
    "cifar10_resnet50_focal_loss",
    "cifar10_lenet5",
    "cifar10_wrn16-4",
    "cifar100_lenet5",
    "cifar100_wrn16-4",
    "cifar100_densenet-bc-100",
]


def require(module: str):
    """The module named ``module`` imported; where it is not installed the test skips, and fails in
    CI (``CI=true``), which installs every extra."""
    import importlib

    import pytest

    try:
        return importlib.import_module(module)
    except ImportError:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{module} is required in CI (install the torch and dev extras)")
        pytest.skip(f"{module} is not installed (pip install -e '.[torch]')")


def sweep(values, bounded):
    """``values`` as pytest parameters, those outside ``bounded`` marked ``sweep``: a real-data
    sweep's full form runs with ``--full-sweeps``; the default run keeps the bounded cases."""
    import pytest

    unknown = set(bounded) - set(values)
    if unknown:
        raise ValueError(f"bounded cases outside the sweep: {sorted(unknown)}")
    return [pytest.param(v, id=str(v), marks=() if v in bounded else pytest.mark.sweep) for v in values]


def make_reference_input(n=5000, k=10, seed=0):
    """The fixed input of ../shared/reference/README.md, verbatim."""
    rng = np.random.default_rng(seed)
    logits = 3.0 * rng.standard_normal((n, k))
    p_true = softmax(logits / 2.0, axis=1)
    u = rng.random(n)
    labels = (p_true.cumsum(axis=1) < u[:, None]).sum(axis=1)
    labels = np.minimum(labels, k - 1).astype(np.int64)
    return logits, labels


def drawn_set(n, k, seed=0, temperature=2.0):
    """float32 logits 3 N(0, 1) and labels drawn from their softmax at ``temperature``."""
    rng = np.random.default_rng(seed)
    logits = 3.0 * rng.standard_normal((n, k))
    e = np.exp(logits / temperature)
    cumulative = (e / e.sum(axis=1, keepdims=True)).cumsum(axis=1)
    labels = (cumulative < rng.random(n)[:, None]).sum(axis=1).clip(0, k - 1)
    return logits.astype(np.float32), labels


def load_split(name: str, split: str) -> tuple[str, np.ndarray, np.ndarray]:
    """``(input kind, array, labels)`` of one split of a data set in ../shared/data."""
    with np.load(DATA / f"{name}_{split}.npz") as data:
        if "logits" in data:
            return "logits", data["logits"], data["labels"]
        return "probabilities", data["probs"], data["labels"]


def conformal_probabilities(name: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Float64 probabilities of one split for the conformal references: the max-shifted softmax of
    stored logits, or stored probabilities divided by their row sums; and the labels."""
    kind, x, labels = load_split(name, split)
    x = np.asarray(x, dtype=np.float64)
    if kind == "logits":
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True), labels
    return x / x.sum(axis=1, keepdims=True), labels


def synthetic_binary(rng, n, b0, b1):
    """Mix-n-Match Appendix E: P(Y=1) = P(Y=2) = 1/2, x | y ~ N(-1, 1) / N(+1, 1),
    model z1 = sigmoid(b0 + b1 x) for class 1 (index 0 here)."""
    y = rng.integers(0, 2, n)
    x = rng.standard_normal(n) + np.where(y == 0, -1.0, 1.0)
    z1 = expit(b0 + b1 * x)
    return np.column_stack([z1, 1 - z1]), y


def true_binary_ece(b0, b1):
    """E|z1 - P(class 1 | z1)|, with P(class 1 | x) = sigmoid(-2x), by quadrature."""
    from scipy.integrate import quad
    from scipy.stats import norm

    def integrand(x):
        return abs(expit(b0 + b1 * x) - expit(-2 * x)) * 0.5 * (norm.pdf(x, -1) + norm.pdf(x, 1))

    return quad(integrand, -12, 12, limit=400, points=[0])[0]


def binomtest(*args, **kwargs):
    """``scipy.stats.binomtest``, imported on use: scipy.stats at module level would load in every
    test process while it only collects."""
    from scipy.stats import binomtest as test

    return test(*args, **kwargs)
