"""Request and response models of comparisons (``/v1/compare`` and ``/v1/calibrators/{name}/compare``):
the array fields appear for the OpenAPI docs only, as in ``app.registry.schemas``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..registry.schemas import EXAMPLE_LABELS, EXAMPLE_LOGITS, Arrays, Strict, input_check_field
from ..wire.decoding import model_value
from .values import CompareSpec


class CompareFields(Strict):
    methods: list[str | dict[str, Any]] | None = Field(
        None, description="Candidates: method names (or 'irova_ts'), or {method, options, name}; "
                          "default: the default set for the data's size")
    folds: int = Field(5, ge=2, le=20, description="Stratified cross-validation folds")
    seed: int = Field(0, ge=0, description="Seed of the fold assignment")
    preserve_accuracy: bool = Field(False, description="Select among accuracy-preserving candidates only")
    input_check: bool = input_check_field()

    def to_value(self) -> CompareSpec:
        return model_value(self, CompareSpec)


class CompareRequest(CompareFields, Arrays):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS,
                                         "methods": ["temperature", "isotonic_multiclass"], "folds": 2}]},
    )
    labels: list[int]


class CompareOut(BaseModel):
    n_samples: int
    n_classes: int
    folds: int
    seed: int
    uncalibrated: dict[str, float | None] = Field(description="Mean per-fold metrics of the raw input")
    methods: list[dict[str, Any]] = Field(description="Per candidate: mean and sd across folds of each metric")
    selection: dict[str, Any] | None = Field(description="The chosen candidate and why (null if none passes)")
