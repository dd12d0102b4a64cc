"""Persistence of jobs: one row per job with its state, percent done, result or error, and
``updated_at`` (the heartbeat). Every function takes a session from ``Database.read()`` or
``Database.write()``; finished jobs are purged after ``RETENTION``."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, update
from sqlalchemy.orm import Session

from .models import JobRow, utcnow

RETENTION = timedelta(days=1)
MAX_ID_LENGTH = 32


def create_job(session: Session, job_id: str, kind: str) -> None:
    """A new running job; finished jobs older than ``RETENTION`` are purged first."""
    session.execute(delete(JobRow).where(JobRow.status != "running", JobRow.updated_at < utcnow() - RETENTION))
    session.add(JobRow(id=job_id, kind=kind, status="running", percent=0.0))


def update_job(session: Session, job_id: str, **values) -> None:
    """Set ``values`` on a job and beat its heartbeat."""
    session.execute(update(JobRow).where(JobRow.id == job_id).values(**values, updated_at=utcnow()))


def get_job(session: Session, job_id: str) -> JobRow | None:
    return session.get(JobRow, job_id) if len(job_id) <= MAX_ID_LENGTH else None


def fail_if_silent(session: Session, job_id: str, silent_since: datetime, error: dict) -> None:
    """Mark a running job failed with ``error`` if its heartbeat is older than ``silent_since``
    (only if it still is: its worker may have finished it, or beaten, since it was read)."""
    session.execute(update(JobRow).where(JobRow.id == job_id, JobRow.status == "running",
                                         JobRow.updated_at < silent_since)
                    .values(status="failed", error=error, updated_at=utcnow()))
