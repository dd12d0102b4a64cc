"""Request and response models of set predictors. The array fields appear here for the OpenAPI docs
only: ``app.wire.decoding`` takes arrays straight from the body into numpy."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from calibration import CONFORMAL_SCORES

from ..observations.schemas import DataSource
from ..wire.decoding import model_value
from .values import SetPredictorSpec

MAX_LEVELS = 16  # coverage levels of one set predictor (the core's limit)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SetPredictorFields(_Strict):
    """What a set predictor is fitted with; its held-out rows come as arrays or as ``data``."""

    score: Literal[CONFORMAL_SCORES] = Field("aps", description="Conformity score: `lac` (1 - p_y), `aps` "
                                                                "(Romano et al. 2020) or `raps` (Angelopoulos "
                                                                "et al. 2021)")
    coverage: list[float] = Field(min_length=1, max_length=MAX_LEVELS, description=(
        "Target coverage levels 1 - alpha, each in (0, 1): a set holds the true class with probability at least "
        "this (e.g. [0.9, 0.95]); in a query string comma-separated"))
    class_conditional: bool = Field(False, description="Mondrian: one threshold per class, so that coverage holds "
                                                       "for every class, not only on average")
    k_reg: int = Field(0, ge=0, le=100_000, description="RAPS: ranks up to k_reg are not penalised")
    lam: float = Field(0.0, ge=0.0, le=1e6, description="RAPS: the penalty lambda per rank beyond k_reg")
    randomized: bool = Field(False, description="APS/RAPS: randomised scores (one uniform per row); coverage "
                                                "then exact in expectation, and served sets are random")
    seed: int = Field(0, ge=0, le=2**63 - 1, description="Seed of the fit's uniforms (randomised scores)")
    adaptive: Literal["aci", "dtaci"] | None = Field(None, description=(
        "Keep the served coverage under drift: the threshold of each level follows the labels of the rows the "
        "version served, by adaptive conformal inference (`aci`, Gibbs & Candes 2021, step `adaptive_gamma`) or "
        "its step-free variant (`dtaci`, Gibbs & Candes 2024); marginal, non-randomised sets only"))
    adaptive_gamma: float = Field(0.005, gt=0.0, le=1.0, description="ACI's step gamma (adaptive `aci`)")
    input_check: bool = Field(True, description="Refuse logits that look like probabilities (422)")
    data: DataSource | None = Field(None, description="Fit on the calibrator's stored labelled observations "
                                                      "instead of arrays in the body")

    @field_validator("coverage", mode="before")
    @classmethod
    def _comma_separated(cls, value):
        if isinstance(value, str):  # a query parameter (.npz bodies)
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("coverage")
    @classmethod
    def _levels(cls, value: list[float]) -> list[float]:
        for level in value:
            if not 0 < level < 1:
                raise ValueError(f"every coverage level must lie in (0, 1), got {level}")
        if len(set(value)) != len(value):
            raise ValueError("a coverage level is listed twice")
        return value

    def to_value(self) -> SetPredictorSpec:
        data = self.data.observations.to_value() if self.data is not None else None
        return model_value(self, SetPredictorSpec, data=data)


class SetPredictorRequest(SetPredictorFields):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"score": "aps", "coverage": [0.9],
                                         "logits": [[2.0, 0.5, -1.0], [0.3, 1.8, -0.2], [1.2, 1.0, 0.1],
                                                    [-0.5, 0.2, 1.5]],
                                         "labels": [0, 1, 0, 2]}]},
    )
    logits: list[list[float]] | None = Field(None, description="(n, k) held-out logits; or probabilities")
    probabilities: list[list[float]] | None = Field(None, description="(n, k) held-out probabilities")
    labels: list[int] | None = Field(None, description="(n,) their true classes; not with `data`")


class SetPredictorOut(BaseModel):
    id: int
    name: str
    version: int
    score: str
    coverage: list[float]
    class_conditional: bool
    options: dict[str, Any] = Field(description="k_reg, lam, randomized, seed (and adaptive, adaptive_gamma)")
    thresholds: list[Any] = Field(description="Per coverage level: the threshold q (null: +inf), or one per "
                                              "class when class-conditional")
    counts: list[int] = Field(description="Held-out rows (per class when class-conditional)")
    n_samples: int
    source: dict[str, Any] = Field(description="Where the held-out rows came from: `rows` (posted) or "
                                               "`observations` (the query, and the chunks read)")
    checksum: str
    created_at: datetime
    adaptive: list[dict[str, Any]] | None = Field(None, description=(
        "Fitted with `adaptive` (one entry per coverage level; in the answer of GET of one set predictor): the "
        "method, the miscoverage level served now, the labelled rows applied and the coverage of the sets served "
        "before each of their labels was used"))


class SetPredictorList(BaseModel):
    name: str
    version: int
    set_predictors: list[SetPredictorOut]
