"""The ``Literal`` types that request and response models declare (written out, so that a type checker
reads them) name exactly the values of the tuples the rest of the code checks against."""

from typing import get_args

from calibration import CONFORMAL_SCORES


def test_conformal_score_type_is_the_cores_scores():
    from app.conformal.schemas import ConformalScore

    assert get_args(ConformalScore) == CONFORMAL_SCORES == ("lac", "aps", "raps")


def test_job_state_type_is_every_job_status():
    from app.jobs.status import STATES, JobState

    assert get_args(JobState) == STATES == ("queued", "running", "succeeded", "failed", "cancelled")


def test_observation_source_type_is_the_sources():
    from app.observations.values import SOURCES, Source

    assert get_args(Source) == SOURCES == ("upload", "feedback")
