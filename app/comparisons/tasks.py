"""The comparisons domain's job: ``compare``, a cross-validated comparison of methods (its folds fanned
out into ``compare-part`` jobs where other workers can take them)."""

from __future__ import annotations

from ..jobs.handlers import JobContext, job_handler
from ..jobs.inputs import batch_of_job
from .service import Comparisons
from .values import CompareSpec


@job_handler("compare")
def compare(job: JobContext) -> dict:
    if job.payload is None:  # a comparison's arrays always travel with its job (Comparisons.compare_or_submit)
        raise ValueError("a compare job has no input arrays")
    batch = batch_of_job(job.request, job.payload, CompareSpec.from_dict)
    return Comparisons(job.service).compare_as_job(batch, job.progress, job.fan_out())
