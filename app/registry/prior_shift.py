"""Serving under label shift: posteriors re-weighted from the class frequencies a version was fitted
on to the class priors the caller says production has (Saerens, Latinne & Decaestecker 2002,
"Adjusting the outputs of a classifier to new a priori probabilities"):

    p'(y | x) ∝ p(y | x) · π'(y) / π(y)

where ``π`` is the fit's class frequencies (stored with each version's report as ``class_counts``;
a version fitted before they were stored needs ``source_priors`` in the request) and ``π'`` the
request's ``priors`` (for instance the ``suggestion`` of ``GET /v1/calibrators/{name}/label-shift``:
EM on bias-corrected temperature scaling, tested for a shift and shrunk toward the source priors,
``calibration.prior_shift``; its raw EM estimate can be worse than no adjustment on small sets).
The calibration must hold for the re-weighting to be right: that is why it is applied after it."""

from __future__ import annotations

import numpy as np

import calibration as cal

from ..platform.errors import InvalidInput, refused_as
from . import store
from .cache import LoadedVersion


def fitted_frequencies(db, loaded: LoadedVersion) -> list[float] | None:
    """The class frequencies of the rows ``loaded`` was fitted on, or ``None`` when not stored."""
    with db.read() as session:
        counts = (store.version_by_id(session, loaded.resolved).report or {}).get("class_counts")
    if not counts:
        return None
    total = float(sum(counts))
    return [c / total for c in counts]


def adjusted(db, loaded: LoadedVersion, probabilities: np.ndarray, priors: list[float],
             source_priors: list[float] | None) -> np.ndarray:
    """``probabilities`` re-weighted to ``priors`` (a 422 for priors that do not fit the classes)."""
    source = source_priors if source_priors is not None else fitted_frequencies(db, loaded)
    if source is None:
        raise InvalidInput(f"version {loaded.version} of {loaded.name!r} was stored without its class frequencies: "
                           "send source_priors with priors")
    with refused_as():
        return cal.adjust_priors(probabilities, source, priors)
