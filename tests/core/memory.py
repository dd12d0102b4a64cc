"""What the memory tests share: ``synthetic`` over-confident logits of any size, and ``traced_peak``,
the most memory tracemalloc saw allocated while a function ran."""

import tracemalloc

import numpy as np


def synthetic(n, k, seed=0):
    """Over-confident logits: N(0, 1) plus 4 on the label, divided by 0.5."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.standard_normal((n, k))
    logits[np.arange(n), labels] += 4.0
    return logits / 0.5, labels


def traced_peak(run) -> int:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
