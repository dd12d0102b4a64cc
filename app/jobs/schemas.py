"""Response models of jobs (``/v1/jobs``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from .status import STATES, JobState

JOB_STATES = STATES  # a plain tuple of text, as the OpenAPI document lists them


class JobOut(BaseModel):
    id: str
    kind: Literal["fit", "compare", "compare-part", "refit", "alarms", "power"]
    status: JobState
    percent: float = Field(description="Work done, 0 to 100")
    step: str | None = Field(description="What the job is doing (or its state, once finished)")
    calibrator: str | None = Field(description="The calibrator a fit stores its version in")
    worker: str | None = Field(description="The process (host:pid) that runs or ran it")
    result: dict[str, Any] | None = Field(description="The response body (a fit's version), once succeeded")
    error: dict[str, Any] | None = Field(description="A problem document, once failed")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime = Field(description="The last progress or heartbeat of a running job")


class JobList(BaseModel):
    jobs: list[JobOut]
