"""What the client returns: plain dataclasses over the service's JSON, and ``Calibrated``, a
numpy array of probabilities that knows which version served it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def _known(cls, data: dict) -> dict:
    """The fields of ``data`` that ``cls`` declares (a newer server may send more)."""
    names = {f.name for f in dataclasses.fields(cls)} - {"raw"}
    return {key: value for key, value in data.items() if key in names}


@dataclass(frozen=True)
class Version:
    """One immutable fitted version of a calibrator (``GET /v1/calibrators/{name}/versions/{v}``).
    ``raw`` is the whole JSON answer."""

    name: str
    version: int
    method: str
    options: dict[str, Any] = field(default_factory=dict)
    input: str = "logits"
    n_classes: int | None = None
    n_samples: int | None = None
    class_names: list[str] | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    diagnostics: dict[str, Any] | None = None
    report: dict[str, Any] | None = field(default=None, repr=False)
    description: str | None = None
    tags: dict[str, str] | None = None
    tensor_names: dict[str, Any] | None = None
    aliases: list[str] = field(default_factory=list)
    checksum: str | None = None
    created_at: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: dict) -> Version:
        return cls(**_known(cls, data), raw=data)

    @property
    def ref(self) -> str:
        return f"{self.name}/versions/{self.version}"


@dataclass(frozen=True)
class Calibrator:
    """A calibrator's summary (``GET /v1/calibrators``): its versions and aliases."""

    name: str
    created_at: str | None = None
    latest_version: int | None = None
    n_versions: int = 0
    aliases: dict[str, int] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: dict) -> Calibrator:
        return cls(**_known(cls, data), raw=data)


@dataclass(frozen=True)
class Job:
    """A background job (``GET /v1/jobs/{id}``): ``status`` is ``queued``, ``running``,
    ``succeeded``, ``failed`` or ``cancelled``; ``percent`` is 0 to 100 and ``step`` what it is
    doing; ``result`` the answer once succeeded (for a fit, the version); ``error`` a problem
    document once failed."""

    id: str
    kind: str | None = None
    status: str = "queued"
    percent: float = 0.0
    step: str | None = None
    calibrator: str | None = None
    worker: str | None = None
    result: Any = None
    error: dict[str, Any] | None = None
    created_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    updated_at: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: dict) -> Job:
        return cls(**_known(cls, data), raw=data)

    @property
    def done(self) -> bool:
        return self.status not in ("queued", "running")

    @property
    def location(self) -> str:
        return f"/v1/jobs/{self.id}"


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
