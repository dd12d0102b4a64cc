"""The arrays the client returns, numpy arrays that say what served them: ``Calibrated``
(probabilities) and ``PredictionSets`` (conformal sets). A module of their own, so that what needs
no array (a command line's listing, an alias move) never loads numpy."""

from __future__ import annotations

import numpy as np


class Calibrated(np.ndarray):
    """Calibrated probabilities, ``(n, k)`` float64, that also say what served them: ``name`` and
    ``version`` (``None`` only from a server too old to name it in a binary answer's
    ``X-Calibrator-Version``). Arrays derived from it (slices, ``argmax``) carry the
    same name and version; ``np.asarray(calibrated)`` is a plain array.

    With the calibrator's prediction log on, ``ids`` are the prediction ids the service used, one
    per row (the caller's, or the ones it generated), to post labels with, and ``logged`` how many
    rows it kept (``n``, or 0 when the request was not sampled); both are ``None`` when the
    calibrator does not log. They belong to the answer's rows in order, so a derived array (a
    slice, a reordering) has ``None``."""

    name: str | None
    version: int | None
    ids: list[str] | None
    logged: int | None

    def __new__(cls, probabilities, name: str | None = None, version: int | None = None,
                ids: list[str] | None = None, logged: int | None = None):
        array = np.asarray(probabilities).view(cls)
        array.name = name
        array.version = version
        array.ids = None if ids is None else [str(i) for i in ids]
        array.logged = logged
        return array

    def __array_finalize__(self, obj) -> None:
        self.name = getattr(obj, "name", None)
        self.version = getattr(obj, "version", None)
        self.ids = None
        self.logged = None

    def __reduce__(self):  # pickling keeps the attributes (np.ndarray's own reduce drops them)
        return Calibrated, (np.asarray(self), self.name, self.version, self.ids, self.logged)


class PredictionSets(np.ndarray):
    """Conformal prediction sets, an ``(n, k)`` boolean mask (``sets[i, j]``: class ``j`` is in row
    ``i``'s set), that also says what served them: ``name``, ``version``, ``set_predictor`` (the id
    of the version's set predictor) and ``coverage`` (its level); ``probabilities`` when they were
    asked for beside the sets (else ``None``), and the prediction log's ``ids`` and ``logged`` as
    ``Calibrated`` has them. ``classes()`` lists each row's class indices. Derived arrays keep the
    name, version, set predictor and coverage, not the per-row fields."""

    name: str | None
    version: int | None
    set_predictor: int | None
    coverage: float | None
    probabilities: np.ndarray | None
    ids: list[str] | None
    logged: int | None

    def __new__(cls, mask, name: str | None = None, version: int | None = None, set_predictor: int | None = None,
                coverage: float | None = None, probabilities: np.ndarray | None = None,
                ids: list[str] | None = None, logged: int | None = None):
        array = np.asarray(mask, dtype=bool).view(cls)
        array.name, array.version = name, version
        array.set_predictor, array.coverage = set_predictor, coverage
        array.probabilities = probabilities
        array.ids = None if ids is None else [str(i) for i in ids]
        array.logged = logged
        return array

    def __array_finalize__(self, obj) -> None:
        self.name = getattr(obj, "name", None)
        self.version = getattr(obj, "version", None)
        self.set_predictor = getattr(obj, "set_predictor", None)
        self.coverage = getattr(obj, "coverage", None)
        self.probabilities = None
        self.ids = None
        self.logged = None

    def classes(self) -> list[list[int]]:
        """Each row's set as its class indices, ascending."""
        return [np.flatnonzero(row).tolist() for row in np.asarray(self)]

    def __reduce__(self):  # pickling keeps the attributes (np.ndarray's own reduce drops them)
        return PredictionSets, (np.asarray(self), self.name, self.version, self.set_predictor, self.coverage,
                                self.probabilities, self.ids, self.logged)
