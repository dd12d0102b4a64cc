"""``Serving``: what the other domains use of the calibration service (``app.registry.service``), as a
protocol, so that they can name its type without importing the service (which imports them); and the
values the service takes (frozen dataclasses; the routes turn the request models of
``app.registry.schemas`` into them): what a fit, a calibrate call and a report or metrics call ask for
besides their arrays. A fit's value is also a job's request (``to_dict``/``from_dict``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

import calibration as cal

from ..jobs.runner import JobProgress, JobRunner
from ..observations.service import Observations
from ..observations.values import ObservationSelection, selection_of_source, selection_to_source
from ..platform.db import Database
from ..platform.values import entries_of
from ..prediction_log.service import PredictionLog
from ..wire.batches import ArrayBatch
from ..wire.costs import RequestLimits
from .cache import LoadedVersion
from .names import Reference


@dataclass(frozen=True)
class FitSpec:
    """A fit: ``method`` with its ``options``, the class names, description, tags and ``/v2`` tensor
    names the version keeps, whether logits that look like probabilities are refused
    (``input_check``), and ``data``: the stored observations to fit on instead of arrays in the body."""

    method: str
    options: dict[str, Any] = field(default_factory=dict)
    class_names: list[str] | None = None
    description: str | None = None
    tags: dict[str, str] | None = None
    tensor_names: dict[str, Any] | None = None
    input_check: bool = True
    data: ObservationSelection | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fit as JSON, as a job keeps its request (``data`` as ``{"observations": ...}``)."""
        return {"method": self.method, "options": self.options, "class_names": self.class_names,
                "description": self.description, "tags": self.tags, "tensor_names": self.tensor_names,
                "input_check": self.input_check, "data": selection_to_source(self.data)}

    @classmethod
    def from_dict(cls, data: Any, where: str = "a stored fit request") -> FitSpec:
        """The fit of a ``to_dict`` dict; ``ValueError`` naming the field when it is damaged."""
        if not isinstance(data, dict):
            raise ValueError(f"{where}: {data!r} is not an object")
        rest = {name: value for name, value in data.items() if name != "data"}
        return cls(**entries_of(cls, rest, where), data=selection_of_source(data.get("data"), f"{where}: data"))


@dataclass(frozen=True)
class CalibrateSpec:
    """A calibrate call: the ``outputs`` to answer with (``set``: conformal sets at ``coverage``, from
    set predictor ``set_predictor`` or the newest at that level), ``input_check``, the prediction
    ``ids`` to log, the production ``priors`` to re-weight to (from ``source_priors``, default the
    fit's) and the ``dtype`` of the answer (``None``: as the question's)."""

    outputs: list[str] = field(default_factory=lambda: ["probabilities"])
    coverage: float | None = None
    set_predictor: int | None = None
    input_check: bool = True
    ids: list[str] | None = None
    priors: list[float] | None = None
    source_priors: list[float] | None = None
    dtype: str | None = None


@dataclass(frozen=True)
class EvaluationSpec:
    """A report or metrics call: ``n_bins`` of the binned metrics, ``bootstrap`` resamples (0: none) for
    intervals at level ``confidence`` drawn with ``seed``, and ``input_check``."""

    n_bins: int = 15
    bootstrap: int = 0
    confidence: float = 0.95
    seed: int = 0
    input_check: bool = True


class Serving(Protocol):
    """The database, the job runner, the prediction log and the observations of one service, its
    limits, and its three calls: resolve and load a version (``serving``), calibrate validated inputs
    with it (``predict``) and fit a labelled batch as the next version (``fit``)."""

    db: Database
    jobs: JobRunner | None
    prediction_log: PredictionLog | None
    observations: Observations
    limits: RequestLimits
    max_parameters: int
    max_read_entries: int
    sync_budget_seconds: float

    def serving(self, reference: Reference) -> LoadedVersion: ...

    def predict(self, loaded: LoadedVersion, inputs: cal.InputBatch) -> np.ndarray: ...

    def fit(self, name: str, batch: ArrayBatch[FitSpec], job: JobProgress | None = None) -> dict: ...
