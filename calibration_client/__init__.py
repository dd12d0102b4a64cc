"""A Python client of the calibration service (``Client``, ``AsyncClient``) and the
``calibration`` command line (``calibration_client.cli``, needs the ``client`` extra).

Needs only httpx and numpy: it never imports the service (``app``) or the numeric core
(``calibration``).

>>> from calibration_client import Client
>>> with Client("http://127.0.0.1:8000") as client:
...     version = client.fit("resnet50", logits, labels, method="temperature")
...     probabilities = client.calibrate("resnet50", batch)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    CalibrationError,
    Conflict,
    ConnectionFailed,
    Forbidden,
    InvalidInput,
    JobFailed,
    NotFound,
    PayloadTooLarge,
    ServerError,
    Unauthorized,
    Unavailable,
)

if TYPE_CHECKING:
    from .arrays import Calibrated, PredictionSets
    from .client import AsyncClient, Client
    from .models import Calibrator, Job, Version

# the clients (httpx), their models and their arrays (numpy) load on first use (PEP 562), so that the
# command line's `--help` and usage errors need neither, and its commands that send no array no numpy
_LAZY = {"AsyncClient": "client", "Client": "client", "Calibrated": "arrays", "Calibrator": "models", "Job": "models",
         "PredictionSets": "arrays", "Version": "models"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "AsyncClient",
    "Calibrated",
    "CalibrationError",
    "Calibrator",
    "Client",
    "Conflict",
    "ConnectionFailed",
    "Forbidden",
    "InvalidInput",
    "Job",
    "JobFailed",
    "NotFound",
    "PayloadTooLarge",
    "PredictionSets",
    "ServerError",
    "Unauthorized",
    "Unavailable",
    "Version",
]
