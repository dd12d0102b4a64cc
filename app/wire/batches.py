"""The values that travel between the HTTP edge and the service: a decoded ``ArrayBatch`` in
(``app.wire.decoding`` makes it) and a ``CalibratedBatch`` out (``app.wire.encoding`` writes it), with
what the prediction log did with the batch (``Served``, made by ``app.prediction_log.service``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

import calibration as cal

from ..platform.errors import InvalidInput, refused_as

Fields = TypeVar("Fields")


@dataclass(frozen=True)
class ArrayBatch(Generic[Fields]):
    """A decoded batch: the validated small ``fields``, the input ``kind`` (``logits``,
    ``probabilities`` or ``scores``), its ``values`` and the ``labels`` (or ``None``). A fit on
    stored data has no arrays (``kind`` ``None``; ``fields.data`` says which observations). The arrays
    are as decoded (numpy arrays, or nested lists from JSON); the core validates them. ``fields`` is
    the request model as decoded (``app.wire.decoding.decode_batch``), and the domain value a service
    takes once the route has turned it into one (``decode_values``)."""

    fields: Fields
    kind: str | None
    values: np.ndarray | list | None
    labels: np.ndarray | list | None


@dataclass(frozen=True, slots=True)
class Served:
    """A served batch of ``n`` rows as the prediction log saw it: the client's ``client_ids``, or
    generated ids (``prefix`` and the row number), and how many rows it ``logged`` (0 or ``n``)."""

    n: int
    logged: int
    client_ids: list[str] | None = None
    prefix: str | None = None

    @property
    def ids(self) -> list[str]:
        """Every row's id (built only when asked: a binary answer carries just the prefix)."""
        if self.client_ids is not None:
            return self.client_ids
        return [f"{self.prefix}{i}" for i in range(self.n)]


@dataclass(frozen=True)
class CalibratedBatch:
    """Calibrated probabilities of a batch, with the version that served them."""

    name: str
    version: int
    probabilities: np.ndarray
    inputs: np.ndarray  # the validated input (logits or probabilities): argmax ties follow it
    class_names: list[str] | None
    served: Served | None = None  # what the prediction log did with the batch (None: logging off)
    question: np.dtype | None = None  # the dtype the input arrived in (None: JSON lists)
    sets: np.ndarray | None = None  # boolean (n, k) conformal set mask (outputs ``set``), else None
    set_predictor: int | None = None  # the id of the set predictor that gave ``sets``
    coverage: float | None = None  # the coverage level of ``sets``

    def answer_dtype(self, asked: str | None, binary: bool) -> np.dtype:
        """The probabilities' dtype in the answer: ``asked`` if given; else float32 for a binary
        answer to a float32 or float16 question, float64 otherwise (JSON answers keep float64's
        numbers). The probabilities themselves are computed in float64."""
        if asked is not None:
            return np.dtype(asked)
        small = self.question is not None and self.question.kind == "f" and self.question.itemsize <= 4
        return np.dtype(np.float32 if binary and small else np.float64)

    def predicted_class(self) -> np.ndarray:
        return cal.predicted_class(self.probabilities, self.inputs)

    def confidence(self) -> np.ndarray:
        return self.probabilities.max(axis=1)


LOOKS_LIKE_PROBABILITIES = ("these look like probabilities; send them as `probabilities` (every row of the logits "
                            "is non-negative and sums to 1; set input_check to false if they really are logits)")


def validated(batch: ArrayBatch) -> tuple[cal.InputBatch, np.ndarray | None]:
    """The batch's input validated by the core, and its labels if it has them. Logits that look
    like probabilities (``calibration.looks_like_probabilities``) are refused unless the request
    sets ``input_check: false``: calibrating probabilities as if they were logits is silently wrong."""
    if batch.kind is None:  # a batch that names stored observations: there are no arrays to validate
        raise InvalidInput("send exactly one of logits, probabilities or scores")
    with refused_as():
        inputs = cal.validate_inputs(batch.values, batch.kind)
        labels = None if batch.labels is None else cal.check_labels(batch.labels, inputs.n, inputs.k)
    if (batch.kind == "logits" and getattr(batch.fields, "input_check", True)
            and inputs.looks_like_probabilities()):
        raise InvalidInput(LOOKS_LIKE_PROBABILITIES)
    return inputs, labels

