"""The job states that annotations name (``JobState``, a ``Literal`` the type checker reads) are the
states jobs go through (``JobStatus``), in their order."""

from typing import get_args

from app.jobs.status import STATES, JobState, JobStatus


def test_the_job_state_type_names_every_status_in_order():
    assert get_args(JobState) == STATES == tuple(JobStatus) == ("queued", "running", "succeeded", "failed",
                                                                  "cancelled")
