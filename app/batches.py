"""The values that travel between the HTTP edge and the service: a decoded ``ArrayBatch`` in
(``app.decoding`` makes it) and a ``CalibratedBatch`` out (``app.encoding`` writes it)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel

import calibration as cal


@dataclass(frozen=True)
class ArrayBatch:
    """A decoded batch: the validated small ``fields``, the input ``kind`` (``logits``,
    ``probabilities`` or ``scores``), its ``values`` and the ``labels`` (or ``None``). The arrays
    are as decoded (numpy arrays, or nested lists from JSON); the core validates them."""

    fields: BaseModel
    kind: str
    values: np.ndarray | list
    labels: np.ndarray | list | None


@dataclass(frozen=True)
class CalibratedBatch:
    """Calibrated probabilities of a batch, with the version that served them."""

    name: str
    version: int
    probabilities: np.ndarray
    inputs: np.ndarray  # the validated input (logits or probabilities): argmax ties follow it
    class_names: list[str] | None

    def predicted_class(self) -> np.ndarray:
        return cal.predicted_class(self.probabilities, self.inputs)

    def confidence(self) -> np.ndarray:
        return self.probabilities.max(axis=1)
