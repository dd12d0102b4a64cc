"""Shared test data: the reference input of ../shared/reference and the real model outputs."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from scipy.special import softmax

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


def make_reference_input(n=5000, k=10, seed=0):
    """The fixed input of ../shared/reference/README.md, verbatim."""
    rng = np.random.default_rng(seed)
    logits = 3.0 * rng.standard_normal((n, k))
    p_true = softmax(logits / 2.0, axis=1)
    u = rng.random(n)
    labels = (p_true.cumsum(axis=1) < u[:, None]).sum(axis=1)
    labels = np.minimum(labels, k - 1).astype(np.int64)
    return logits, labels


def load_split(name: str, split: str) -> tuple[str, np.ndarray, np.ndarray]:
    """``(input kind, array, labels)`` of one split of a data set in ../shared/data."""
    with np.load(DATA / f"{name}_{split}.npz") as data:
        if "logits" in data:
            return "logits", data["logits"], data["labels"]
        return "probabilities", data["probs"], data["labels"]
