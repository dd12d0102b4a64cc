"""The registry's job: ``fit``, a fit stored as the next version (an ``auto`` fit's cross-validation
fanned out as a comparison's is). The version and the job's success are recorded in one transaction
(``JobProgress.finish_with``), so the handler returns no result of its own."""

from __future__ import annotations

from ..jobs import fan_out
from ..jobs.handlers import JobContext, job_handler
from ..jobs.tasks import fit_batch


@job_handler("fit")
def fit(job: JobContext) -> None:
    runner = job.fan_out()
    if runner is not None:
        job.progress.auto_in_parts = lambda calibrator: fan_out.fit_auto_in_parts(calibrator, runner)
    job.service.fit(job.calibrator, fit_batch(job.service, job.request, job.payload), job=job.progress)
