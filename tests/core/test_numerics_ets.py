"""Issue #23, item 4: ensemble temperature scaling with loss="nll" reaches the minimum over the
weight simplex even when a label probability is 5e-24 (a gradient of order 1e19 at a vertex)."""

import numpy as np
import pytest

import calibration as cal
from tests.helpers import load_split, make_reference_input


def heavy_tailed_set():
    logits, labels = make_reference_input(n=2000, k=10, seed=7)
    logits[0] = 0.0
    logits[0, (labels[0] + 1) % 10] = 110.0  # label probability e^-110 raw, ~e^-53 after t ≈ 2.09
    return logits, labels


def label_components(ets, logits, labels):
    rows = np.arange(len(labels))
    return np.column_stack([cal.softmax(logits / ets.temperature_)[rows, labels],
                            cal.softmax(logits)[rows, labels], np.full(len(labels), 1.0 / logits.shape[1])])


def grid_minimum(v, centre=None, half_width=None, step=1 / 200):
    """Minimum of -mean log(v w) over a grid of the simplex (w1, w2 on a square grid, w3 = 1 - w1 - w2)."""
    lo = (0.0, 0.0) if centre is None else (max(0.0, centre[0] - half_width), max(0.0, centre[1] - half_width))
    hi = (1.0, 1.0) if centre is None else (min(1.0, centre[0] + half_width), min(1.0, centre[1] + half_width))
    a = np.arange(lo[0], hi[0] + step / 2, step)
    b = np.arange(lo[1], hi[1] + step / 2, step)
    w1, w2 = (g.ravel() for g in np.meshgrid(a, b))
    keep = w1 + w2 <= 1.0
    weights = np.column_stack([w1[keep], w2[keep], np.maximum(0.0, 1.0 - w1[keep] - w2[keep])])
    best, best_value = None, np.inf
    with np.errstate(divide="ignore"):
        for chunk in np.array_split(weights, max(1, len(weights) // 2000)):
            values = -np.mean(np.log(v @ chunk.T), axis=0)
            i = int(np.argmin(values))
            if values[i] < best_value:
                best, best_value = chunk[i], float(values[i])
    return best, best_value


def fine_grid_minimum(v):
    coarse, _ = grid_minimum(v)
    return grid_minimum(v, centre=coarse, half_width=0.01, step=1e-4)


def check_reaches_the_grid_minimum(logits, labels):
    ets = cal.EnsembleTemperatureScaling(loss="nll").fit(logits, labels)
    v = label_components(ets, logits, labels)
    ours = float(-np.mean(np.log(v @ ets.weights_)))
    _, grid_value = fine_grid_minimum(v)
    assert ets.diagnostics_.converged
    assert ours <= grid_value + 1e-12
    # first-order optimality on the simplex: no component has a lower partial derivative than
    # those in the support, which share one value
    gradient = -np.mean(v / (v @ ets.weights_)[:, None], axis=0)
    support = ets.weights_ > 1e-9
    assert np.ptp(gradient[support]) <= 1e-6
    assert np.all(gradient >= gradient[support].min() - 1e-6)
    return ets


def test_a_label_probability_of_5e_24_does_not_stop_the_weights():
    logits, labels = heavy_tailed_set()
    ets = check_reaches_the_grid_minimum(logits, labels)
    smallest = label_components(ets, logits, labels)[:, 0].min()
    assert 1e-25 < smallest < 1e-22  # the heavy row is really there
    assert ets.weights_[0] < 0.95  # the optimum is not the starting vertex of the old solver


@pytest.mark.parametrize("name", ["cifar10_resnet50_cross_entropy", "cifar100_lenet5"])
def test_real_sets_reach_the_grid_minimum(name):
    kind, x, labels = load_split(name, "val")
    logits = x if kind == "logits" else np.log(np.clip(x, 1e-12, 1.0))
    check_reaches_the_grid_minimum(logits.astype(np.float64), labels)
