"""The promotion domain's job: ``refit``, a refit policy's fit, evaluation and gated promotion."""

from __future__ import annotations

from ..jobs.handlers import JobContext, job_handler
from . import policies


@job_handler("refit")
def refit(job: JobContext) -> dict:
    return policies.run_refit(job.service, job.name, job.request, job.progress)
