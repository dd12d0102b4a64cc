"""The monitoring domain's jobs: ``alarms`` (the drift monitors of a calibrator brought up to date,
queued by ``app.promotion.scheduler``) and ``power`` (the drift monitor's power analysis)."""

from __future__ import annotations

import json

from calibration import json_safe

from ..jobs.handlers import JobContext, job_handler
from ..settings import get_settings
from . import alarms, power


@job_handler("alarms")
def evaluate_alarms(job: JobContext) -> dict:
    """The drift monitors brought up to date, new alarms queued for CALIBRATION_ALARM_WEBHOOK_URL
    (``app.monitoring.webhooks``; the scheduler delivers them); as a job's result (times as ISO 8601 text)."""
    result = alarms.evaluate(job.service, job.name, webhook_url=get_settings().alarm_webhook_url)
    return json.loads(json.dumps(json_safe(result), default=lambda value: value.isoformat()))


@job_handler("power")
def power_analysis(job: JobContext) -> dict:
    return power.run(job.service, job.name, job.request, job.progress)
