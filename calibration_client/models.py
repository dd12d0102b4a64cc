"""What the client returns: plain dataclasses over the service's JSON (the arrays it returns,
``Calibrated`` and ``PredictionSets``, are numpy's: ``arrays``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


def _known(cls, data: dict) -> dict:
    """The fields of ``data`` that ``cls`` declares (a newer server may send more)."""
    names = {f.name for f in dataclasses.fields(cls)} - {"raw"}
    return {key: value for key, value in data.items() if key in names}


@dataclass(frozen=True)
class Version:
    """One immutable fitted version of a calibrator (``GET /v1/calibrators/{name}/versions/{v}``).
    ``raw`` is the whole JSON answer."""

    name: str
    version: int
    method: str
    options: dict[str, Any] = field(default_factory=dict)
    input: str = "logits"
    n_classes: int | None = None
    n_samples: int | None = None
    class_names: list[str] | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    diagnostics: dict[str, Any] | None = None
    report: dict[str, Any] | None = field(default=None, repr=False)
    description: str | None = None
    tags: dict[str, str] | None = None
    tensor_names: dict[str, Any] | None = None
    aliases: list[str] = field(default_factory=list)
    checksum: str | None = None
    created_at: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: dict) -> Version:
        return cls(**_known(cls, data), raw=data)

    @property
    def ref(self) -> str:
        return f"{self.name}/versions/{self.version}"


@dataclass(frozen=True)
class Calibrator:
    """A calibrator's summary (``GET /v1/calibrators``): its versions and aliases."""

    name: str
    created_at: str | None = None
    latest_version: int | None = None
    n_versions: int = 0
    aliases: dict[str, int] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: dict) -> Calibrator:
        return cls(**_known(cls, data), raw=data)


@dataclass(frozen=True)
class Job:
    """A background job (``GET /v1/jobs/{id}``): ``status`` is ``queued``, ``running``,
    ``succeeded``, ``failed`` or ``cancelled``; ``percent`` is 0 to 100 and ``step`` what it is
    doing; ``result`` the answer once succeeded (for a fit, the version); ``error`` a problem
    document once failed."""

    id: str
    kind: str | None = None
    status: str = "queued"
    percent: float = 0.0
    step: str | None = None
    calibrator: str | None = None
    worker: str | None = None
    result: Any = None
    error: dict[str, Any] | None = None
    created_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    updated_at: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: dict) -> Job:
        return cls(**_known(cls, data), raw=data)

    @property
    def done(self) -> bool:
        return self.status not in ("queued", "running")

    @property
    def location(self) -> str:
        return f"/v1/jobs/{self.id}"


def __getattr__(name: str) -> Any:
    """``Calibrated`` and ``PredictionSets`` by their former address (and so older pickles of them),
    loaded from ``arrays`` (and numpy) when asked for (PEP 562)."""
    if name in ("Calibrated", "PredictionSets"):
        from . import arrays

        return getattr(arrays, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
