"""Response models of the quality, drift-alarm, label-shift and promotion endpoints, for the docs
(the routes answer with the service's JSON; the nested values are described, not re-modelled)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class QualityWindow(_Open):
    window: str | int = Field(description="The hour or day (UTC), or the window's number of rows")
    n_rows: int
    versions: dict[str, int] = Field(description="Rows per version that scored them")
    calibrated: dict[str, Any] = Field(description="Each metric's estimate, low and high, calibrated")
    uncalibrated: dict[str, Any] = Field(description="The same of the raw inputs")
    label_free: dict[str, Any] = Field(description="Expected accuracy, mean entropy, predicted class distribution")
    coverage: dict[str, Any] = Field(default_factory=dict, description=(
        "Per coverage level of the set predictors serving the window's rows: `n_rows`, `coverage` (estimate and "
        "Wilson interval `low`/`high` at `confidence`), `mean_set_size` and `size_counts` (rows per set size)"))


class QualityOut(_Open):
    name: str
    window: str
    version: int | None = None
    bootstrap: int = Field(description="Resamples per interval (cut to the budget if `bootstrap_asked` is shown)")
    windows: list[QualityWindow]


class Monitor(_Open):
    version: int
    signal: str = Field(description="`labelled` (the feedback it served), `label_free` (its logged predictions) "
                                    "or `coverage@<level>` (the coverage of its prediction sets at that level)")
    n_rows: int
    e_value: float
    alarm: bool
    alarm_rows: int | None = None
    alarmed_at: datetime | None = None
    reference: dict[str, Any] | None = Field(
        None, description="Label-free monitors: the reference's rows, the alpha its confidence bounds spend, "
                          "its confidence radius, the smallest detectable drift and (with `drift`) the reference "
                          "rows that drift needs")


class AlarmsOut(_Open):
    name: str
    alarms: list[Monitor] = Field(description="The monitors that alarmed")
    monitors: list[Monitor]
    new_alarms: list[dict[str, Any]] | None = Field(None, description="Raised by this evaluation (POST only)")


class WebhookDelivery(_Open):
    id: str = Field(description="The delivery id: the `Webhook-Id` header and the body's `id`, the same on "
                                "every attempt")
    version: int
    signal: str
    state: str = Field(description="`pending`, `delivered` or `failed` (after the last allowed attempt)")
    attempts: int = Field(description="Attempts begun")
    url: str = Field(description="The receiver's scheme and host (its path is not shown: it may hold a secret)")
    next_attempt_at: datetime | None = Field(None, description="When the next attempt may begin (pending only)")
    last_error: str | None = Field(None, description="What the latest failed attempt met")
    created_at: datetime
    delivered_at: datetime | None = None


class DeliveriesOut(_Open):
    name: str
    deliveries: list[WebhookDelivery] = Field(description="The newest 100, newest first")


class LabelShiftOut(_Open):
    name: str
    em: dict[str, Any] | None = Field(None, description="EM's priors (Saerens et al. 2002), iterations, convergence")
    bbse: dict[str, Any] | None = Field(None, description="BBSE's priors (Lipton et al. 2018)")
    suggestion: dict[str, Any] | None = Field(
        None, description="The adjustment to serve: EM on bias-corrected temperature scaling, the likelihood-ratio "
                          "test of no shift (statistic, degrees_of_freedom, p_value, alpha), the shrinkage toward "
                          "the source priors and suggested_priors (adjust false: serve unadjusted)")


class AliasMove(_Open):
    action: str = Field(description="set, rollback or delete")
    from_version: int | None = None
    to_version: int | None = None
    actor: str | None = Field(None, description="The API key id (keys on), or `policy`")
    evaluation: str | None = Field(None, description="The evaluation given as evidence")
    moved_at: datetime


class AliasHistoryOut(_Open):
    name: str
    alias: str
    version: int | None = Field(None, description="Where the alias points now")
    require_evaluation: bool
    moves: list[AliasMove]


class AliasMoveOut(_Open):
    name: str
    alias: str
    version: int
    move: AliasMove | None = None


class GateOut(_Open):
    name: str
    alias: str
    require_evaluation: bool


class ServingOut(_Open):
    name: str
    v2_default: str = Field(description="`latest` or the alias an unversioned /v2 call serves")


class EvaluationOut(_Open):
    id: str
    verdict: str = Field(description="challenger_better, champion_better or inconclusive")
    created_at: datetime


class EvaluationBrief(_Open):
    id: str
    challenger: int
    champion: int
    alpha: float
    n_rows: int
    verdict: str
    created_at: datetime


class EvaluationList(_Open):
    name: str
    evaluations: list[EvaluationBrief]


class PolicyOut(_Open):
    name: str
    last_run_at: datetime | None = None


class PolicyRunOut(_Open):
    name: str
    triggered: bool = Field(description="False: no trigger fired (202 with the refit job when one did)")


# -- health and the Open Inference Protocol (documented; the protocol defines them) ----------------

class HealthOut(_Open):
    status: str


class ReadyOut(_Open):
    status: str = Field(description="ready, or unavailable (503, with what is wrong)")
    database: str
    schema_revision: str | None = Field(None, alias="schema", description="The migration the database is at")


class V2ServerMetadata(_Open):
    name: str
    version: str
    extensions: list[str]


class V2Live(_Open):
    live: bool


class V2Ready(_Open):
    ready: bool


class V2ModelMetadata(_Open):
    name: str
    versions: list[str]
    platform: str
    inputs: list[dict[str, Any]] = Field(description="Name, datatype and shape of the input tensor")
    outputs: list[dict[str, Any]] = Field(description="Name, datatype and shape of each output tensor")


class V2ModelReady(_Open):
    name: str
    version: str
    ready: bool


class V2InferResponse(_Open):
    model_name: str
    model_version: str
    id: str | None = None
    outputs: list[dict[str, Any]] = Field(description="Each output's name, datatype, shape and data (or "
                                                      "binary_data_size, its bytes after the JSON header)")
    parameters: dict[str, Any] | None = Field(None, description="With the prediction log on: `ids` and `logged`")
