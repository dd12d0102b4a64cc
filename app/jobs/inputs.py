"""A job's input: the validated labelled batch of the request that started it, stored with the
job (small fields as JSON, arrays as an ``.npz`` of numeric arrays, never unpickled), so that a
worker on another machine computes exactly what the request would have."""

from __future__ import annotations

import numpy as np

from ..wire.batches import ArrayBatch
from . import store as job_store


def job_input(batch: ArrayBatch, labels: np.ndarray) -> tuple[dict, bytes]:
    """A validated labelled batch as a job's request fields and payload: the input as the numeric
    array it was decoded to (float32 stays float32: half the bytes of the float64 the core
    validates it to, and no float64 copy here). The job validates it again, and the core's
    conversion to float64 is exact, so a job computes exactly what the request would have."""
    request = {"kind": batch.kind, "fields": batch.fields.model_dump(mode="json")}
    return request, job_store.pack_arrays(values=np.asarray(batch.values), labels=labels)


def batch_of_job(request: dict, payload: bytes | None, fields_model) -> ArrayBatch:
    """The batch ``job_input`` stored; a job's payload is dropped when it ends (``None`` then)."""
    if payload is None:
        raise ValueError("this job's input arrays are gone: it has ended")
    arrays = job_store.unpack_arrays(payload)
    return ArrayBatch(fields_model.model_validate(request["fields"]), request["kind"], arrays["values"],
                      arrays["labels"])
