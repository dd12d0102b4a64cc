"""The comparisons domain's job: ``compare``, a cross-validated comparison of methods (its folds fanned
out into ``compare-part`` jobs where other workers can take them)."""

from __future__ import annotations

from ..jobs.handlers import JobContext, job_handler
from ..jobs.inputs import batch_of_job
from .schemas import CompareFields
from .service import Comparisons


@job_handler("compare")
def compare(job: JobContext) -> dict:
    batch = batch_of_job(job.request, job.payload, CompareFields)
    return Comparisons(job.service).compare_as_job(batch, job.progress, job.fan_out())
