"""Bootstrap confidence intervals for any metric (percentile method, seeded).

Rows are resampled with replacement ``n_resamples`` times (jointly across all arrays given,
e.g. raw probabilities, calibrated probabilities and labels); the interval is the
``(1 - confidence)/2`` and ``(1 + confidence)/2`` percentiles of the resampled values
(Efron & Tibshirani 1993, ch. 13). The estimate is the metric on the full data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class Interval:
    estimate: float
    low: float
    high: float
    confidence: float
    n_resamples: int

    def to_dict(self) -> dict:
        return asdict(self)


def bootstrap_interval(
    metric: Callable[..., float],
    *arrays,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    **kwargs,
) -> Interval:
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    given = [np.asarray(a) for a in arrays]
    n = len(given[0])
    if any(len(a) != n for a in given):
        raise ValueError("all arrays must have the same number of rows")
    estimate = metric(*given, **kwargs)
    rng = np.random.default_rng(seed)
    values = np.empty(n_resamples)
    for i in range(n_resamples):
        rows = rng.integers(0, n, n)
        values[i] = metric(*(a[rows] for a in given), **kwargs)
    low, high = np.percentile(values, [50 * (1 - confidence), 50 * (1 + confidence)])
    return Interval(float(estimate), float(low), float(high), confidence, n_resamples)
