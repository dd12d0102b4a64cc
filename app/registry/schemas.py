"""Request and response models. The array fields appear here for the OpenAPI docs only:
``app.wire.decoding`` takes arrays straight from the body into numpy and validates the remaining
small fields with these models."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from calibration import METHODS, InputKind

from ..observations.schemas import DataSource, PredictionId
from ..wire.decoding import model_value
from .serving import CalibrateSpec, EvaluationSpec, FitSpec

Output = Literal["probabilities", "predicted_class", "confidence", "set"]
DEFAULT_OUTPUTS: tuple[Output, ...] = ("probabilities",)


def input_check_field():
    return Field(True, description="Refuse logits that look like probabilities (every row non-negative and "
                                   "summing to 1 within 1e-6) with a 422; false sends them as logits anyway")

# the examples' JSON values (list[Any]: a json_schema_extra holds any JSON)
EXAMPLE_LOGITS: list[Any] = [
    [2.0, 0.5, -1.0], [0.3, 1.8, -0.2], [1.2, 1.0, 0.1], [-0.5, 0.2, 1.5],
    [1.5, -0.3, 0.4], [0.1, 0.9, 1.1], [2.2, 1.9, -0.4], [-1.0, 0.4, 0.8],
]
EXAMPLE_LABELS: list[Any] = [0, 1, 1, 2, 2, 0, 1, 2]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Arrays(Strict):
    logits: list[list[float]] | None = Field(None, description="(n, k) logits; or send probabilities or scores")
    probabilities: list[list[float]] | None = Field(None, description="(n, k) probabilities, rows summing to 1")
    scores: list[float] | None = Field(None, description="(n,) binary scores, the log-odds of class 1")


class TensorNames(Strict):
    inputs: list[str] | None = Field(None, description="Accepted /v2 input tensor names (default: any)")
    probabilities: str = "probabilities"
    predicted_class: str = "predicted_class"
    confidence: str = "confidence"


class FitFields(Strict):
    method: str = Field(description="A method from GET /v1/methods", json_schema_extra={"enum": list(METHODS)})
    options: dict[str, Any] = Field(default_factory=dict, description="Options of the method (see /v1/methods)")
    class_names: list[str] | None = Field(None, description="One name per class, in label order")
    description: str | None = Field(None, max_length=10_000)
    tags: dict[str, str] | None = None
    tensor_names: TensorNames | None = Field(None, description="Tensor names on the /v2 protocol")
    input_check: bool = input_check_field()
    data: DataSource | None = Field(None, description="Fit on stored data instead of arrays in the body")

    def to_value(self) -> FitSpec:
        return model_value(self, FitSpec, tensor_names=self.tensor_names.model_dump() if self.tensor_names else None,
                           data=self.data.observations.to_value() if self.data is not None else None)


class FitRequest(FitFields, Arrays):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"method": "temperature", "logits": EXAMPLE_LOGITS,
                                         "labels": EXAMPLE_LABELS, "description": "demo fit"}]},
    )
    labels: list[int] | None = Field(None, description="(n,) integer class labels in [0, k); not with `data`")


class CalibrateFields(Strict):
    outputs: list[Output] = Field(
        default_factory=lambda: list(DEFAULT_OUTPUTS),
        description="Which outputs to return; `set`: the conformal prediction set of each row at `coverage` "
                    "(JSON: the class indices; .npy: an (n, k) uint8 mask, with `set` the only output)",
    )
    coverage: float | None = Field(None, gt=0, lt=1, description=(
        "With outputs `set`: the coverage level, one the version's set predictor was fitted at "
        "(POST .../versions/{version}/set-predictors); the newest such set predictor serves"))
    set_predictor: int | None = Field(None, ge=1, le=2**31 - 1, description=(
        "With outputs `set`: the id of the version's set predictor to use instead of the newest at `coverage`"))
    input_check: bool = input_check_field()
    ids: list[PredictionId] | None = Field(None, description="Prediction ids, one per row, to join labels later "
                                                              "(logging on); without them ids are generated")
    priors: list[float] | None = Field(None, description="Production class priors: posteriors re-weighted to them")
    source_priors: list[float] | None = Field(None, description="Priors to re-weight from (default: the fit's)")
    dtype: Literal["float32", "float64"] | None = Field(None, description=(
        "Precision of the probabilities (computed in float64; only the answer is cast). Default: an .npy "
        "answer in the question's (float32 for a float32/float16 .npy or .npz), JSON float64. `?dtype=`"))

    def to_value(self) -> CalibrateSpec:
        return model_value(self, CalibrateSpec)


class CalibrateRequest(CalibrateFields, Arrays):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"logits": EXAMPLE_LOGITS[:2],
                                         "outputs": ["probabilities", "predicted_class", "confidence"]}]},
    )


class EvaluationFields(Strict):
    n_bins: int = Field(15, ge=1, le=1000, description="Bins of the binned metrics and diagrams")
    bootstrap: int = Field(0, ge=0, le=2000, description="Bootstrap resamples for intervals (0: none)")
    confidence: float = Field(0.95, gt=0, lt=1, description="Level of the bootstrap intervals")
    seed: int = Field(0, ge=0, description="Seed of the bootstrap resampling")
    input_check: bool = input_check_field()

    def to_value(self) -> EvaluationSpec:
        return model_value(self, EvaluationSpec)


class ReportRequest(EvaluationFields, Arrays):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS}]},
    )
    labels: list[int]


class MetricsRequest(EvaluationFields, Arrays):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"probabilities": [[0.8, 0.2], [0.3, 0.7], [0.6, 0.4]],
                                         "labels": [0, 1, 1]}]},
    )
    labels: list[int]


class AliasRequest(Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"version": 1}]})
    version: StrictInt = Field(ge=1, le=2**31 - 1)


# -- responses (documentation; bodies are serialised with orjson) ----------------------------

class Diagnostics(BaseModel):
    converged: bool
    iterations: int
    message: str
    gradient_norm: float | None = None
    objective: float | None = None
    seconds: float
    floored_rows: int | None = Field(None, description="Only when the probability floor (2.2e-16) changed "
                                                       "predictions of the fitted rows: how many rows")
    zero_label_rows: int | None = Field(None, description="Of those, rows whose label got probability exactly 0 "
                                                          "(unfloored NLL infinite)")
    warning: str | None = Field(None, description="Says so, in words")


class VersionOut(BaseModel):
    name: str
    version: int
    method: str
    options: dict[str, Any]
    input: InputKind
    n_classes: int
    n_samples: int
    class_names: list[str] | None = None
    parameters: dict[str, Any] = Field(description="Fitted parameters in readable form")
    diagnostics: Diagnostics
    report: dict[str, Any] = Field(description="Validation report: metrics before and after on the fit data")
    description: str | None = None
    tags: dict[str, str] | None = None
    tensor_names: dict[str, Any] | None = None
    aliases: list[str]
    checksum: str
    created_at: datetime


class CalibratorOut(BaseModel):
    name: str
    created_at: datetime
    latest_version: int | None
    n_versions: int
    aliases: dict[str, int]


class CalibratorList(BaseModel):
    calibrators: list[CalibratorOut]
    next_page_token: str | None = None


class AliasOut(BaseModel):
    name: str
    alias: str
    version: int


class CalibrateOut(BaseModel):
    name: str
    version: int
    probabilities: list[list[float]] | None = None
    predicted_class: list[int] | None = None
    predicted_class_name: list[str] | None = None
    confidence: list[float] | None = None
    set: list[list[int]] | None = Field(None, description="Per row, the class indices in its prediction set")
    set_predictor: int | None = Field(None, description="The id of the set predictor that gave `set`")
    coverage: float | None = Field(None, description="The coverage level of `set`")
    ids: list[str] | None = Field(None, description="Prediction ids (when the calibrator logs predictions)")
    logged: int | None = Field(None, description="Rows kept in the prediction log (sampled)")


class ReportOut(BaseModel):
    name: str | None = None
    version: int | None = None
    n_samples: int
    n_classes: int
    n_bins: int
    before: dict[str, Any]
    after: dict[str, Any]
    calibration_gain: float | None
    calibration_gain_interval: dict[str, Any] | None = None


class MetricsOut(BaseModel):
    n_samples: int
    n_classes: int
    n_bins: int
    metrics: dict[str, float | None]
    reliability_diagram: dict[str, Any]
    intervals: dict[str, Any] | None = None


class MethodOut(BaseModel):
    name: str
    description: str
    accuracy_preserving: bool | str
    options: dict[str, Any]


class MethodList(BaseModel):
    methods: list[MethodOut]


class ProblemOut(BaseModel):
    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    request_id: str | None = None


class DamagedVersion(BaseModel):
    version: int
    detail: str = Field(description="Why it is refused: a stored column that cannot be read, or that does not "
                                    "match the version's digest")


class VersionList(BaseModel):
    name: str
    versions: list[VersionOut] = Field(description="The intact versions of this page")
    damaged: list[DamagedVersion] = Field([], description="Versions of this page whose stored record is damaged "
                                                          "(getting or serving one is a 500 problem naming it)")
    next_page_token: str | None = None
