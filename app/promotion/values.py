"""The promotion domain's values, as its services take them (frozen dataclasses; the routes turn the
request models of ``app.promotion.schemas`` into them): a challenger evaluation, and a refit policy
(also as its stored configuration, ``to_dict``/``from_dict``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..observations.values import ObservationSelection
from ..platform.values import entries_of


@dataclass(frozen=True)
class ChallengeSpec:
    """An evaluation of ``challenger`` against ``champion`` (versions, by number or alias; no champion:
    the versions that served each labelled prediction) on ``data`` (``None``: the observations created
    after both): confidence sequences at level ``alpha``, the verdict on the loss ``decide_on``, ECE of
    ``n_bins`` bins with ``bootstrap`` resamples at level ``confidence`` drawn with ``seed``. (The
    request's deprecated ``nll_clip`` is accepted and ignored: it has no place here.)"""

    challenger: int | str
    champion: int | str | None = None
    data: ObservationSelection | None = None
    alpha: float = 0.05
    decide_on: str = "nll"
    n_bins: int = 15
    bootstrap: int = 200
    confidence: float = 0.95
    seed: int = 0


@dataclass(frozen=True)
class PolicySpec:
    """A refit policy: its triggers (``every_labels`` new labelled observations, a drift alarm
    ``on_alarm``, ``every_seconds``), its data (the newest ``last`` observations less their newest
    ``holdout`` fraction), its ``method`` and ``options``, and the ``alias`` the challenger is evaluated
    against at level ``alpha`` (moved to it when ``promote`` and the verdict favours it)."""

    every_labels: int | None = None
    on_alarm: bool = False
    every_seconds: float | None = None
    last: int = 50000
    holdout: float = 0.2
    method: str = "auto"
    options: dict[str, Any] = field(default_factory=dict)
    alias: str | None = None
    promote: bool = False
    alpha: float = 0.05

    def to_dict(self) -> dict[str, Any]:
        """The policy as JSON, as it is stored and shown."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "a stored refit policy") -> PolicySpec:
        """The policy of a ``to_dict`` dict; ``ValueError`` naming the field when it is damaged."""
        return cls(**entries_of(cls, data, where))
