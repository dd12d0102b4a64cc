"""The method registry: names → calibrator classes, their option schemas, and dispatch.

A leaf module: ``calibration.methods`` registers every method class here (in the order the
docs list them), so methods that build other methods (``composition``, ``auto`` through
``selection``) import this module without an import circle. The service lists methods,
validates options and loads stored calibrators through this module alone, so it exposes
exactly what the core offers.
"""

from __future__ import annotations

from .base import Calibrator
from .options import options_schema

METHODS: dict[str, type[Calibrator]] = {}

ACCURACY_PRESERVING_WHEN = {"composition": "when every step is", "auto": "when preserve_accuracy is set"}


def register(cls: type[Calibrator]) -> type[Calibrator]:
    """Make ``cls`` available under ``cls.method``."""
    if cls.method in METHODS and METHODS[cls.method] is not cls:
        raise ValueError(f"method {cls.method!r} is registered twice")
    METHODS[cls.method] = cls
    return cls


def method_class(name) -> type[Calibrator]:
    if not isinstance(name, str) or name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(METHODS)}")
    return METHODS[name]


def create(name: str, options: dict | None = None) -> Calibrator:
    """An unfitted calibrator of the named method with validated options."""
    if options is not None and not isinstance(options, dict):
        raise ValueError("options must be an object of option names to values")
    return method_class(name)(**(options or {}))


def from_dict(data: object) -> Calibrator:
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
            "accuracy_preserving": ACCURACY_PRESERVING_WHEN.get(name, cls.accuracy_preserving),
            "options": options_schema(cls.options_spec),
        }
        for name, cls in METHODS.items()
    ]
