"""Coverage of served prediction sets over time, on domain values: for each labelled row, whether the
set a version's set predictor gives its calibrated probabilities holds the label, and the set's size;
per window (the quality history's windows) and per level, the empirical coverage with its **Wilson
score interval** (Wilson 1927; ``calibration.wilson_interval``, statsmodels' ``method="wilson"``) and
the mean set size with the distribution of sizes.

A split-conformal set at level ``alpha`` covers with probability in ``[1 - alpha, 1 - alpha + 1/(n + 1))``
while the rows stay exchangeable with the calibration rows (Vovk et al. 2005; Lei et al. 2018,
Theorem 2.2): a window whose interval lies below ``1 - alpha`` shows that they no longer are.

Randomised APS/RAPS sets are recomputed with fresh uniforms (``numpy.random.default_rng(seed)``), one
per row: the served sets' draws are not stored, and a fresh draw has the same distribution, so the
coverage and sizes have the served sets' expectation.
"""

from __future__ import annotations

import numpy as np

import calibration as cal

from ..conformal.service import ConformalService, alpha_of
from ..platform.errors import IntegrityFailure, NotFound
from ..registry.names import Reference


def set_outcomes(predictor: cal.SetPredictor, probs: np.ndarray, labels: np.ndarray, alpha: float,
                 seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(covered, size)`` per row: ``covered[i]`` iff ``labels[i]`` is in row ``i``'s set at ``alpha``,
    ``size[i]`` the number of classes in it."""
    mask = predictor.predict_sets(probs, alpha, seed=seed if predictor.randomized else None)
    return mask[np.arange(len(labels)), labels], mask.sum(axis=1)


def coverage_summary(covered: np.ndarray, sizes: np.ndarray, n_classes: int, confidence: float = 0.95) -> dict:
    """The coverage of a group of rows (estimate, Wilson ``low``/``high`` at ``confidence``), their mean
    set size and ``size_counts[s]``, the rows whose set held ``s`` classes (``s = 0..n_classes``)."""
    n = len(covered)
    if n == 0:
        return {"n_rows": 0, "coverage": {"estimate": None, "low": None, "high": None}, "mean_set_size": None,
                "size_counts": [0] * (n_classes + 1)}
    hits = int(np.count_nonzero(covered))
    low, high = cal.wilson_interval(hits, n, confidence)
    return {"n_rows": n, "coverage": {"estimate": hits / n, "low": float(low), "high": float(high)},
            "mean_set_size": float(np.mean(sizes)),
            "size_counts": np.bincount(np.asarray(sizes, dtype=np.int64), minlength=n_classes + 1).tolist()}


def coverage_by_window(window_of: np.ndarray, keys: list, covered: np.ndarray, sizes: np.ndarray,
                       n_classes: int, confidence: float = 0.95) -> dict:
    """``coverage_summary`` of the rows of each window ``key`` (``window_of[i]``, row ``i``'s window)."""
    return {key: coverage_summary(covered[window_of == key], sizes[window_of == key], n_classes, confidence)
            for key in keys}


def conformal_of(service):
    """The set predictors' service over ``service`` (the registry's), for reads off the request path."""
    return ConformalService(service.db, service, service.integrity_key)


def serving_predictors(service, name: str, version: int) -> dict[float, tuple[int, cal.SetPredictor]]:
    """``{coverage: (set predictor id, predictor)}``: for each coverage level fitted on ``name``'s
    ``version``, the set predictor that serves it (the newest at that level); empty when there is none
    (or the version was deleted)."""
    conformal = conformal_of(service)
    try:
        listed = conformal.list(name, version)["set_predictors"]
        loaded = service.serving(Reference.pinned(name, version))
        levels = sorted({level for predictor in listed for level in predictor["coverage"]})
        return {level: conformal.predictor_for(loaded, level) for level in levels}
    except (NotFound, IntegrityFailure):
        return {}


def window_coverage(service, name: str, calibrated: np.ndarray, labels: np.ndarray, versions: np.ndarray,
                    window_of: np.ndarray, keys: list, confidence: float, seed: int) -> dict:
    """``{window: {coverage level: coverage_summary}}`` of the rows of each window: each row's set from
    the set predictor serving its version at that level (rows of a version without one are left out
    of that level)."""
    k = calibrated.shape[1]
    outcomes: dict[float, list] = {}
    for version in np.unique(versions):
        rows = np.flatnonzero(versions == version)
        for level, (_, predictor) in serving_predictors(service, name, int(version)).items():
            covered, sizes = set_outcomes(predictor, calibrated[rows], labels[rows], alpha_of(level), seed)
            outcomes.setdefault(level, []).append((rows, covered, sizes))
    out: dict = {key: {} for key in keys}
    for level, parts in sorted(outcomes.items()):
        rows = np.concatenate([p[0] for p in parts])
        covered, sizes = np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts])
        for key, summary in coverage_by_window(window_of[rows], keys, covered, sizes, k, confidence).items():
            if summary["n_rows"]:
                out[key][f"{level:g}"] = summary
    return out
