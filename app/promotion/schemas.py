"""Request models of safe promotion: gated alias moves, gates, serving settings and
challenger evaluations."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StringConstraints

from ..observations.schemas import DataSource
from ..wire.decoding import model_value
from .values import ChallengeSpec, PolicySpec

VersionOrAlias = StrictInt | Annotated[str, StringConstraints(min_length=1, max_length=64)]
EVALUATION_ID = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AliasMoveRequest(_Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"version": 2},
                                                                              {"version": 2, "evaluation": "0" * 32}]})
    version: StrictInt = Field(ge=1, le=2**31 - 1)
    evaluation: EVALUATION_ID | None = Field(None, description="An evaluation whose verdict favours `version` over "
                                                              "the alias's current version (needed when gated)")


class GateRequest(_Strict):
    require_evaluation: bool = Field(description="Moving the alias needs an evaluation that favours the new "
                                                 "version over the current one")


class ServingRequest(_Strict):
    v2_default: str = Field("latest", min_length=1, max_length=64,
                            description="What an unversioned /v2 call serves: `latest`, or an alias")


class EvaluationRequest(_Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"challenger": 3, "champion": "production", "alpha": 0.05}]})
    challenger: VersionOrAlias = Field(description="The new version (number or alias)")
    champion: VersionOrAlias | None = Field(None, description="The version it must beat (number or alias, e.g. "
                                                             "production); without one, the versions that served "
                                                             "each labelled prediction (a shadow evaluation)")
    data: DataSource | None = Field(None, description="Which stored observations (default: those created after "
                                                      "both versions, which neither was fitted on)")
    alpha: float = Field(0.05, gt=0, le=0.5, description="Error level of the confidence sequences and verdict")
    decide_on: Literal["nll", "brier"] = Field("nll", description="The loss whose difference decides the verdict")
    nll_clip: float | None = Field(None, gt=0, le=100, deprecated=True,
                                   description="Deprecated and ignored: nothing is clipped. Each row's NLL is "
                                               "floored at probability 2.2e-16, so differences lie within "
                                               "+-36.04 nats, the bound of the confidence sequence")
    n_bins: int = Field(15, ge=1, le=1000)
    bootstrap: int = Field(200, ge=0, le=2000, description="Bootstrap resamples of the ECE intervals (0: none)")
    confidence: float = Field(0.95, gt=0, lt=1)
    seed: int = Field(0, ge=0, le=2**31 - 1)

    def to_value(self) -> ChallengeSpec:
        data = self.data.observations.to_value() if self.data is not None else None
        return model_value(self, ChallengeSpec, data=data)


class RefitPolicy(_Strict):
    """When to refit, on which data, with which method, and which alias the challenger must beat."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"every_labels": 5000, "on_alarm": True, "last": 50000, "holdout": 0.2, "method": "auto",
         "alias": "production", "promote": True, "alpha": 0.05}]})
    every_labels: int | None = Field(None, ge=1, le=10**9, description="Refit once this many labelled "
                                                                       "observations arrived since the last refit")
    on_alarm: bool = Field(False, description="Refit when a drift alarm was raised since the last refit")
    every_seconds: float | None = Field(None, ge=60, le=10**9, description="Refit on a schedule")
    last: int = Field(50000, ge=100, le=10**8, description="Refit on the newest `last` observations ...")
    holdout: float = Field(0.2, ge=0, lt=1, description="... less their newest fraction, kept to evaluate the "
                                                        "challenger against the alias")
    method: str = Field("auto", description="The method of the refit (see GET /v1/methods)")
    options: dict[str, Any] = Field(default_factory=dict, description="Its options")
    alias: str | None = Field(None, min_length=1, max_length=64, description="The alias the challenger is "
                                                                              "evaluated against")
    promote: bool = Field(False, description="Move `alias` to the challenger when the verdict favours it")
    alpha: float = Field(0.05, gt=0, le=0.5, description="Level of the evaluation's verdict")

    def to_value(self) -> PolicySpec:
        return model_value(self, PolicySpec)
