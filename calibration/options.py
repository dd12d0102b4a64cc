"""Declared options of a calibration method: their types, defaults, bounds and JSON schema.

Each method lists its options once; validation (``ValueError`` naming the option) and the
schema the service publishes are both derived from that list. Every numeric option that sets an
amount of work or of stored parameters has a ``maximum`` (a list a ``max_items``), so that a
few rows cannot buy minutes of CPU or megabytes of parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

_JSON_TYPES = {float: "number", int: "integer", str: "string", bool: "boolean", list: "array"}


@dataclass(frozen=True)
class Option:
    name: str
    type: type
    default: Any
    description: str
    choices: tuple | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    max_items: int | None = None  # a list's length at most

    def validate(self, value: Any) -> Any:
        where = f"option {self.name!r}"
        if self.type is float:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{where} must be a number, got {value!r}")
            value = float(value)
            if not math.isfinite(value):
                raise ValueError(f"{where} must be finite, got {value!r}")
        elif self.type is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{where} must be an integer, got {value!r}")
        elif not isinstance(value, self.type):
            raise ValueError(f"{where} must be of type {_JSON_TYPES[self.type]}, got {value!r}")
        if self.choices is not None and value not in self.choices:
            allowed = ", ".join(repr(c) for c in self.choices)
            raise ValueError(f"{where} must be one of {allowed}, got {value!r}")
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"{where} must be >= {self.minimum}, got {value!r}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"{where} must be <= {self.maximum}, got {value!r}")
        if self.exclusive_minimum is not None and value <= self.exclusive_minimum:
            raise ValueError(f"{where} must be > {self.exclusive_minimum}, got {value!r}")
        if self.max_items is not None and len(value) > self.max_items:
            raise ValueError(f"{where} may list at most {self.max_items} items, got {len(value)}")
        return value

    def schema(self) -> dict:
        out: dict[str, Any] = {
            "type": _JSON_TYPES[self.type],
            "default": self.default,
            "description": self.description,
        }
        if self.choices is not None:
            out["enum"] = list(self.choices)
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        if self.exclusive_minimum is not None:
            out["exclusiveMinimum"] = self.exclusive_minimum
        if self.max_items is not None:
            out["maxItems"] = self.max_items
        return out


INPUT_OPTION = Option(
    "input",
    str,
    "logits",
    "What the arrays are: 'logits' (n, k), 'probabilities' (n, k) or binary 'scores' (n,), "
    "read as the log-odds of class 1.",
    choices=("logits", "probabilities", "scores"),
)


def validate_options(method: str, spec: tuple[Option, ...], given: dict | None) -> dict:
    """Defaults filled in, each given value checked; unknown names are an error."""
    given = dict(given or {})
    known = {option.name: option for option in spec}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ValueError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for method {method!r}; "
            f"known: {', '.join(known) or 'none'}"
        )
    return {name: option.validate(given[name]) if name in given else option.default
            for name, option in known.items()}


def options_schema(spec: tuple[Option, ...]) -> dict:
    """JSON schema (an object) of a method's options."""
    return {
        "type": "object",
        "properties": {option.name: option.schema() for option in spec},
        "additionalProperties": False,
    }
