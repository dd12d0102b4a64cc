"""The states of a job. A job is queued, then running, then ends succeeded, failed or cancelled (a
queued job can also be cancelled before it runs). ``JobStatus`` is a ``str`` enum: its values are the
text stored in the ``jobs.status`` column and shown in the API, so rows and answers read the same
whether they hold the enum or the text."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


#: every state, in the order a job goes through them (the API's ``status`` values)
STATES: tuple[str, ...] = tuple(state.value for state in JobStatus)
#: the same states as a type, for annotations (``typing.get_args(JobState) == STATES``)
JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
#: not finished: counted against the queue's capacity
ACTIVE = (JobStatus.QUEUED, JobStatus.RUNNING)
#: finished: purged after the retention time
FINISHED = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)
