"""Request model of the drift monitor's power analysis: a shift of a calibrator's
stored labelled rows, the monitor's options and the simulation's size."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from ..wire.decoding import model_value
from .power import SHIFTS, SIGNALS, PowerSpec


class PowerRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"shift": "temperature", "size": 1.25, "labels": 50000},
        {"shift": "tweak_one", "size": 0.5, "signal": "label_free", "streams": 100, "labels": 20000},
        {"shift": "swap", "size": 1, "swap_classes": [3, 5]}]})
    shift: Literal[SHIFTS] = Field(
        description="temperature: the raw logits times `size`; tweak_one: one class gets prior `size`; dirichlet: "
                    "priors ~ Dirichlet(`size`) per stream; swap: `size` class pairs' labels exchanged")
    size: float = Field(description="The shift's size (temperature: factor, 1 is none; tweak_one: the class's prior; "
                                    "dirichlet: concentration; swap: number of pairs)")
    shift_class: StrictInt | None = Field(None, ge=0, description="tweak_one: the class (default: random per stream)")
    swap_classes: tuple[StrictInt, StrictInt] | None = Field(None, description="swap of size 1: the two classes "
                                                                                  "(default: random per stream)")
    signal: Literal[SIGNALS] = Field("labelled", description="Which monitor: on labels, or on "
                                                                              "predictions against a reference")
    version: StrictInt | None = Field(None, ge=1, le=2**31 - 1, description="The version (default: the latest)")
    streams: StrictInt = Field(200, ge=1, description="Simulated streams (CALIBRATION_POWER_MAX_STREAMS at most)")
    labels: StrictInt = Field(50_000, ge=1, description="Labels (rows) per stream at most; the detection probability "
                                                        "is within this many (CALIBRATION_POWER_MAX_LABELS)")
    checkpoints: list[StrictInt] | None = Field(None, max_length=50, description="Also the detection probability "
                                                                                  "within each of these many labels")
    alpha: float = Field(0.01, ge=1e-10, lt=1, description="The monitor's false-alarm probability, ever")
    tolerance: float = Field(0.02, ge=0, lt=0.5, description="The monitor's tolerance on mean confidence - accuracy")
    class_tolerance: float = Field(0.02, ge=0, lt=0.5, description="The monitor's tolerance on each class's mean "
                                                                   "probability - frequency")
    half_life: float = Field(1000.0, gt=0, le=1e9, description="Rows of the monitor's bet's memory")
    confidence: float = Field(0.95, gt=0, lt=1, description="Level of the intervals")
    seed: StrictInt = Field(0, ge=0, le=2**31 - 1)

    def to_value(self) -> PowerSpec:
        return model_value(self, PowerSpec)
