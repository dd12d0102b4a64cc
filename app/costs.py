"""Coarse estimates of what work will cost, made before it starts: a fit or comparison
estimated past ``CALIBRATION_SYNC_BUDGET_SECONDS`` runs as a job instead of in the request."""

from __future__ import annotations

import calibration as cal

# Seconds per input entry (n·k) of one fit, by method: coarse figures measured on this
# project's 2-core machine (5000x10 and 50000x100 sets, fit plus validation report), the basis of
# the sync budget's estimate; a method not listed counts as the slowest.
SECONDS_PER_ENTRY = {
    "temperature": 2e-7, "expectation_consistency": 2e-7, "platt": 2e-7, "histogram_binning": 3e-7,
    "ensemble_temperature": 1e-6, "isotonic_multiclass": 4e-7, "isotonic_one_vs_all": 6e-7,
    "class_temperature": 1e-6, "composition": 1e-6, "vector": 4e-6,
}
SECONDS_PER_ENTRY_AND_CLASS = {"matrix": 4e-7, "dirichlet": 4e-7}  # k² parameters


def estimated_fit_seconds(method: str, options: dict, n: int, k: int) -> float:
    """A coarse estimate of a fit's cost; ``auto`` counts its cross-validation (every candidate on
    each fold, then the refit). Options the fit itself will refuse count as free: the fit then
    runs in the request and answers with the precise error."""
    if method == "auto":
        try:
            candidates = cal.prepare_comparison(n, k, options.get("candidates") or None, options.get("folds", 5),
                                                options.get("input", "logits"))
        except ValueError:
            return 0.0
        folds = options.get("folds", 5)
        return sum(estimated_fit_seconds(c.method, c.options, n, k) for c in candidates) * (folds + 1)
    if method in SECONDS_PER_ENTRY_AND_CLASS:
        return SECONDS_PER_ENTRY_AND_CLASS[method] * n * k * k
    return SECONDS_PER_ENTRY.get(method, max(SECONDS_PER_ENTRY.values())) * n * k
