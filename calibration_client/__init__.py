"""A Python client of the calibration service (``Client``, ``AsyncClient``) and the
``calibration`` command line (``calibration_client.cli``, needs the ``client`` extra).

Needs only httpx and numpy: it never imports the service (``app``) or the numeric core
(``calibration``).

>>> from calibration_client import Client
>>> with Client("http://127.0.0.1:8000") as client:
...     version = client.fit("resnet50", logits, labels, method="temperature")
...     probabilities = client.calibrate("resnet50", batch)
"""

from .client import AsyncClient, Client
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
from .models import Calibrated, Calibrator, Job, PredictionSets, Version

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
