"""Typed results → response bodies: ``Accept`` negotiation, calibrated batches as JSON or
``.npy``, and JSON bytes (``codecs.dump_json``: numpy arrays natively, non-finite as null).

A body is ``bytes`` or a tuple of buffers (``Parts``: an ``.npy`` header and a view of the
probabilities' own buffer) that the route sends one after another, never joined."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .batches import CalibratedBatch
from .codecs import dump_json, npy_parts
from .decoding import JSON_TYPE, NPY_TYPE

Parts = tuple[bytes | memoryview, ...]
IMAGE_FORMATS = {"image/png": "png", "image/svg+xml": "svg"}


def wants(accept: str | None, media: str) -> bool:
    """Whether an ``Accept`` header asks for ``media``."""
    return media in (accept or "").lower()


def image_format(accept: str | None) -> tuple[str, str] | None:
    """``(media type, format)`` of the image an ``Accept`` header asks for, if any."""
    for media, fmt in IMAGE_FORMATS.items():
        if wants(accept, media):
            return media, fmt
    return None


def calibrated_headers(result: CalibratedBatch) -> dict[str, str]:
    """The serving version, and with logging on how many rows were logged and, for generated ids,
    their prefix (id ``i`` is the prefix and ``i``): what a binary answer cannot carry in its body."""
    headers = {"X-Calibrator-Version": str(result.version)}
    if result.set_predictor is not None:
        headers["X-Set-Predictor"] = str(result.set_predictor)
    served = result.served
    if served is not None:
        headers["Prediction-Logged"] = str(served.logged)
        if served.prefix is not None:
            headers["Prediction-Id-Prefix"] = served.prefix
    return headers


def calibrated_body(result: CalibratedBatch, outputs: Sequence[str], accept: str | None,
                    dtype: str | None = None) -> tuple[bytes | Parts, str]:
    """A calibrated batch as ``.npy`` probabilities (``Accept: application/x-npy``), in the
    question's precision unless ``dtype`` asks (``CalibratedBatch.answer_dtype``), or the ``(n, k)``
    uint8 set mask when ``set`` is asked (an ``.npy`` answer is one array: ``set`` alone); or as
    JSON with the requested ``outputs`` (``set``: each row's class indices, ascending)."""
    if wants(accept, NPY_TYPE):
        if result.sets is not None:
            return npy_parts(result.sets.view(np.uint8), np.dtype(np.uint8)), NPY_TYPE
        return npy_parts(result.probabilities, result.answer_dtype(dtype, binary=True)), NPY_TYPE
    probabilities = result.probabilities.astype(result.answer_dtype(dtype, binary=False), copy=False)
    out: dict = {"name": result.name, "version": result.version}
    if "probabilities" in outputs:
        out["probabilities"] = probabilities
    if "predicted_class" in outputs:
        predicted = result.predicted_class()
        out["predicted_class"] = predicted
        if result.class_names:
            out["predicted_class_name"] = [result.class_names[i] for i in predicted]
    if "confidence" in outputs:
        out["confidence"] = probabilities.max(axis=1)
    if result.sets is not None:
        _, classes = np.nonzero(result.sets)  # row-major: each row's classes in ascending order
        ends = np.cumsum(result.sets.sum(axis=1))[:-1]
        out["set"] = [part.tolist() for part in np.split(classes, ends)] if len(result.sets) else []
        out["set_predictor"], out["coverage"] = result.set_predictor, result.coverage
    if result.served is not None:
        out["ids"], out["logged"] = result.served.ids, result.served.logged
    return dump_json(out), JSON_TYPE
