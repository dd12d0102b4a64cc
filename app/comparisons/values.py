"""The comparisons domain's value, as the service takes it (a frozen dataclass; the routes turn
``app.comparisons.schemas.CompareFields`` into it), and as a ``compare`` job keeps it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..platform.values import entries_of


@dataclass(frozen=True)
class CompareSpec:
    """A comparison: the candidate ``methods`` (names, or ``{method, options, name}``; ``None``: the
    default set for the data's size), stratified cross-validation over ``folds`` folds assigned with
    ``seed``, whether only accuracy-preserving candidates may be selected, and ``input_check``."""

    methods: list[str | dict[str, Any]] | None = None
    folds: int = 5
    seed: int = 0
    preserve_accuracy: bool = False
    input_check: bool = True

    def to_dict(self) -> dict[str, Any]:
        """The comparison as JSON, as a job keeps its request."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "a stored comparison request") -> CompareSpec:
        """The comparison of a ``to_dict`` dict; ``ValueError`` naming the field when it is damaged."""
        return cls(**entries_of(cls, data, where))
