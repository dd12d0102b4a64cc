"""Plain-JSON values of results: a non-finite float (an infinite NLL, an undefined spread) has
no JSON spelling, so it becomes ``None`` (``null``). The one place that conversion is made, for
the core's ``to_dict`` results and the service's stored reports alike."""

from __future__ import annotations

import math


def json_safe(value):
    """``value`` with every non-finite float replaced by ``None``, through dicts, lists and tuples
    (tuples become lists)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value
