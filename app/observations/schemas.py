"""Request and response models of observations, the prediction log and fits from stored data."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ..wire.decoding import model_value
from .values import SOURCES, ObservationSelection, UploadSpec

FUTURE_SKEW = timedelta(minutes=5)  # clocks differ: an observation a little ahead of ours is accepted
PredictionId = Annotated[str, StringConstraints(min_length=1, max_length=128)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ObservationQuery(_Strict):
    """Which stored observations to use: all of them unless narrowed."""

    last: int | None = Field(None, ge=1, description="The newest `last` rows")
    since: datetime | None = Field(None, description="Rows observed at or after this time (ISO 8601, with offset)")
    until: datetime | None = Field(None, description="Rows observed before this time")
    source: Literal[SOURCES] | None = Field(None, description="Only uploads, or only labelled feedback")
    version: int | None = Field(None, ge=1, le=2**31 - 1, description="Only feedback on predictions this "
                                                                      "version served")

    @model_validator(mode="after")
    def _aware(self):
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                raise ValueError(f"{name} needs a UTC offset (e.g. 2026-11-23T00:00:00Z)")
        return self

    def to_value(self) -> ObservationSelection:
        return model_value(self, ObservationSelection)


class DataSource(_Strict):
    observations: ObservationQuery = Field(description="Fit on the calibrator's stored observations")


class ObservationFields(_Strict):
    input_check: bool = Field(True, description="Refuse logits that look like probabilities (422)")
    observed_at: datetime | None = Field(None, description="When these rows were observed (default: now); "
                                                           "for back-filling history; not in the future")

    @model_validator(mode="after")
    def _past_and_aware(self):
        if self.observed_at is not None:
            if self.observed_at.tzinfo is None:
                raise ValueError("observed_at needs a UTC offset (e.g. 2026-11-23T00:00:00Z)")
            if self.observed_at > datetime.now(UTC) + FUTURE_SKEW:
                raise ValueError("observed_at is in the future")
        return self

    def to_value(self) -> UploadSpec:
        return model_value(self, UploadSpec)


class ObservationRequest(ObservationFields):
    logits: list[list[float]] | None = None
    probabilities: list[list[float]] | None = None
    scores: list[float] | None = None
    labels: list[int]


ONLINE_VERSION = ("The version an online calibrator (online_platt) stored by updating its latest version on "
                  "these rows, in order; null when the latest version is not online")


class ObservationsAppended(BaseModel):
    name: str
    appended: int
    total_rows: int
    online_version: int | None = Field(None, description=ONLINE_VERSION)


class LabelsRequest(_Strict):
    ids: list[PredictionId] = Field(min_length=1, description="Prediction ids from calibrate")
    labels: list[int] = Field(min_length=1, description="The true class of each prediction, in the same order")


class LabelsOut(BaseModel):
    name: str
    labelled: int = Field(description="Predictions turned into observations by this call")
    counts: dict[str, int] = Field(description="How many ids got each status")
    statuses: list[Literal["labelled", "unknown", "already_labelled", "duplicate"]] = Field(
        description="Per id, in request order: labelled now; unknown (never logged, not sampled, or still in "
                    "another process's buffer); already labelled; or repeated in this request")
    online_version: int | None = Field(None, description=ONLINE_VERSION)


class LoggingRequest(_Strict):
    sample_rate: float = Field(ge=0, le=1, description="Share of calibrate requests logged, each whole "
                                                       "(so also of rows; 0 turns logging off)")


class LoggingOut(BaseModel):
    name: str
    sample_rate: float
    logged_rows: int = Field(description="Logged predictions the calibrator holds")
    max_logged_rows: int | None = Field(description="Its cap (CALIBRATION_MAX_LOGGED_ROWS)")
    full: bool = Field(description="At the cap: calibrate still answers, its rows are not logged (and counted "
                                   "in dropped_rows) until retention or a delete frees room")
    dropped_rows: int = Field(description="Rows not logged because the log was full, since the name was created")


class PredictionLogSummary(BaseModel):
    """The calibrator's prediction log in an observation summary."""
    sample_rate: float
    logged: int
    labelled: int
    logged_rows: int = Field(description="Rows the log holds for this name (what CALIBRATION_MAX_LOGGED_ROWS caps)")
    dropped: int = Field(description="Rows not logged because the name's log was full")
    full: bool = Field(description="Whether the log is at CALIBRATION_MAX_LOGGED_ROWS (logging paused for the name)")


class ObservationSummary(BaseModel):
    name: str
    total_rows: int
    input_kind: str | None
    n_classes: int | None
    by_source: dict[str, int]
    by_version: dict[str, int]
    by_day: dict[str, int]
    class_counts: list[int]
    class_balance: list[float]
    first_at: datetime | None
    last_at: datetime | None
    prediction_log: PredictionLogSummary


class DeletedObservations(BaseModel):
    name: str
    deleted_rows: int
