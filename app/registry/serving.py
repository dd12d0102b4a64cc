"""``Serving``: what the other domains use of the calibration service (``app.registry.service``), as a
protocol, so that they can name its type without importing the service (which imports them)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

import calibration as cal

from ..jobs.runner import JobProgress, JobRunner
from ..observations.service import Observations
from ..platform.db import Database
from ..prediction_log.service import PredictionLog
from ..wire.batches import ArrayBatch
from ..wire.costs import RequestLimits
from .cache import LoadedVersion
from .names import Reference
from .values import FitSpec


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
