"""The job-kind -> handler registry. Each domain's ``tasks`` module registers the work of its job kinds
with ``@job_handler(kind)``; ``app.jobs.tasks`` runs a claimed job through the handler of its kind, and
``app.wiring`` imports every domain's ``tasks`` so that the registry is full in any process that runs
jobs (the API's job processes and ``calibration-service worker``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class JobContext:
    """A claimed job: its id and kind, the calibrator it is about, its request and input arrays, the
    service that does the work, its ``progress`` points, and ``fan_out()``: how its cross-validation
    fans out into parts (``None`` where it runs whole)."""

    db: Any
    job_id: str
    kind: str
    calibrator: str | None
    request: dict
    payload: bytes | None
    service: Any
    progress: Any
    fan_out: Callable[[], Callable | None]

    @property
    def name(self) -> str:
        """The calibrator the job is about; every kind but a comparison's has one."""
        if self.calibrator is None:
            raise ValueError(f"this {self.kind} job names no calibrator")
        return self.calibrator


#: a handler returns the job's result, or ``None`` when it has recorded the job's end itself
JobHandler = Callable[[JobContext], dict | None]
JOB_HANDLERS: dict[str, JobHandler] = {}


def job_handler(kind: str) -> Callable[[JobHandler], JobHandler]:
    """Register the decorated function as the work of jobs of ``kind`` (one handler per kind)."""

    def register(handler: JobHandler) -> JobHandler:
        if JOB_HANDLERS.get(kind, handler) is not handler:
            raise ValueError(f"job kind {kind!r} already has a handler")
        JOB_HANDLERS[kind] = handler
        return handler

    return register


def handler_of(kind: str) -> JobHandler:
    """The handler of ``kind``; ``ValueError`` for a kind nothing registered."""
    try:
        return JOB_HANDLERS[kind]
    except KeyError:
        raise ValueError(f"unknown job kind {kind!r}") from None
