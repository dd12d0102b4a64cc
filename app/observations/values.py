"""The observations domain's values, as the services take them (frozen dataclasses; the routes turn
the request models of ``app.observations.schemas`` into them): which stored observations a fit, an
evaluation or a set predictor reads, and the fields of an upload."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal, get_args

from ..platform.values import aware, entries_of, json_time

Source = Literal["upload", "feedback"]
SOURCES = get_args(Source)


@dataclass(frozen=True)
class ObservationSelection:
    """Which stored observations: the newest ``last`` rows, those observed in ``[since, until)`` (times
    with an offset), only uploads or only feedback (``source``), only feedback on predictions that
    ``version`` served; ``None`` leaves that unrestricted."""

    last: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    source: Source | None = None
    version: int | None = None

    def __post_init__(self):
        aware(self.since, "since")
        aware(self.until, "until")

    def given(self) -> dict[str, Any]:
        """The restrictions set, by name (times as times)."""
        return {name: value for name, value in asdict(self).items() if value is not None}

    def to_dict(self, exclude_none: bool = False) -> dict[str, Any]:
        """The selection as JSON (times as ISO 8601 text), every field or only those set."""
        return {name: json_time(value) if isinstance(value, datetime) else value
                for name, value in asdict(self).items() if not (exclude_none and value is None)}

    @classmethod
    def from_dict(cls, data: Any, where: str = "a stored selection") -> ObservationSelection:
        """The selection of a ``to_dict`` dict; ``ValueError`` naming the field when it is damaged."""
        return cls(**entries_of(cls, data, where))


def selection_to_source(selection: ObservationSelection | None) -> dict | None:
    """A fit's ``data`` as JSON: ``{"observations": selection}``, or ``None`` (arrays in the body)."""
    return None if selection is None else {"observations": selection.to_dict()}


def selection_of_source(data: Any, where: str) -> ObservationSelection | None:
    """The selection of a ``selection_to_source`` dict (``None`` for ``None``), checked."""
    if data is None:
        return None
    if not isinstance(data, dict) or set(data) != {"observations"}:
        raise ValueError(f"{where}: {data!r} is not {{'observations': {{...}}}}")
    return ObservationSelection.from_dict(data["observations"], f"{where}.observations")


@dataclass(frozen=True)
class UploadSpec:
    """The small fields of an upload of labelled rows: whether logits that look like probabilities
    are refused (``input_check``) and when the rows were observed (``None``: now)."""

    input_check: bool = True
    observed_at: datetime | None = None
