"""A job's input: the validated labelled batch of the request that started it, stored with the
job (small fields as JSON, arrays as an ``.npz`` of numeric arrays, never unpickled), so that a
worker on another machine computes exactly what the request would have."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from ..wire.batches import ArrayBatch
from . import store as job_store

Fields = TypeVar("Fields")


def job_input(batch: ArrayBatch, labels: np.ndarray, fields: dict[str, Any]) -> tuple[dict, bytes]:
    """A validated labelled batch as a job's request (its ``fields`` as JSON) and payload: the input
    as the numeric array it was decoded to (float32 stays float32: half the bytes of the float64 the core
    validates it to, and no float64 copy here). The job validates it again, and the core's
    conversion to float64 is exact, so a job computes exactly what the request would have."""
    request = {"kind": batch.kind, "fields": fields}
    return request, job_store.pack_arrays(values=np.asarray(batch.values), labels=labels)


def batch_of_job(request: dict, payload: bytes, read_fields: Callable[[Any], Fields]) -> ArrayBatch[Fields]:
    """The labelled batch a job's ``job_input`` kept, its fields read back by ``read_fields`` (a
    value's ``from_dict``, which refuses a damaged request naming the field)."""
    arrays = job_store.unpack_arrays(payload)
    return ArrayBatch(read_fields(request["fields"]), request["kind"], arrays["values"], arrays["labels"])
