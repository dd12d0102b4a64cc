"""The method registry: names → calibrator classes, their option schemas, and dispatch.

The service lists methods, validates options and loads stored calibrators through this
module alone, so it exposes exactly what the core offers.
"""

from __future__ import annotations

from .base import Calibrator
from .methods.auto import AutoCalibrator
from .methods.class_temperature import ClassTemperatureScaling
from .methods.composition import Composition
from .methods.ensemble_temperature import EnsembleTemperatureScaling
from .methods.expectation_consistency import ExpectationConsistency
from .methods.histogram_binning import HistogramBinning
from .methods.isotonic import IsotonicMulticlass, IsotonicOneVsAll
from .methods.linear import DirichletCalibration, MatrixScaling, VectorScaling
from .methods.platt import PlattScaling
from .methods.temperature import TemperatureScaling
from .options import options_schema

METHODS: dict[str, type[Calibrator]] = {
    cls.method: cls
    for cls in (
        TemperatureScaling,
        ExpectationConsistency,
        EnsembleTemperatureScaling,
        VectorScaling,
        MatrixScaling,
        DirichletCalibration,
        PlattScaling,
        ClassTemperatureScaling,
        IsotonicMulticlass,
        IsotonicOneVsAll,
        HistogramBinning,
        Composition,
        AutoCalibrator,
    )
}


def method_class(name) -> type[Calibrator]:
    if not isinstance(name, str) or name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(METHODS)}")
    return METHODS[name]


def create(name: str, options: dict | None = None) -> Calibrator:
    """An unfitted calibrator of the named method with validated options."""
    if options is not None and not isinstance(options, dict):
        raise ValueError("options must be an object of option names to values")
    return method_class(name)(**(options or {}))


def from_dict(data: dict) -> Calibrator:
    """Rebuild a fitted calibrator from ``Calibrator.to_dict()`` output."""
    if not isinstance(data, dict):
        raise ValueError("a stored calibrator must be a dict")
    return method_class(data.get("method")).from_dict(data)


def describe_methods() -> list[dict]:
    """Name, description, accuracy preservation and option schema of every method."""
    return [
        {
            "name": name,
            "description": cls.description,
            "accuracy_preserving": {"composition": "when every step is",
                                    "auto": "when preserve_accuracy is set"}.get(name, cls.accuracy_preserving),
            "options": options_schema(cls.options_spec),
        }
        for name, cls in METHODS.items()
    ]
