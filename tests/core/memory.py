"""What the memory tests share: ``synthetic`` over-confident logits of any size, and ``traced``, a
function's result and the most memory tracemalloc saw allocated while it ran (``traced_peak``: that peak)."""

import tracemalloc

import numpy as np


def synthetic(n, k, seed=0):
    """Over-confident logits: N(0, 1) plus 4 on the label, divided by 0.5."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.standard_normal((n, k))
    logits[np.arange(n), labels] += 4.0
    return logits / 0.5, labels


def traced(run):
    """``(run(), the peak bytes it allocated)`` (tracemalloc)."""
    tracemalloc.start()
    try:
        result = run()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def traced_peak(run) -> int:
    return traced(run)[1]
