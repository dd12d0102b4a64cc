"""Persistence of jobs: one row per job with its state, step, percent done, input, result or
error, and ``updated_at`` (the heartbeat). Every function takes a session from
``Database.read()`` or ``Database.write()``; finished jobs are purged after ``RETENTION``.

State changes are conditional updates (``... WHERE status = 'queued'``), so two processes that
race for a job (two pools offered the same job, a worker and a lost-job check) cannot both win.
"""

from __future__ import annotations

import io
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from ..platform.db import rows_matched
from ..platform.rows import utcnow
from .rows import JobRow
from .status import ACTIVE, FINISHED, STATES, JobStatus

RETENTION = timedelta(days=1)
MAX_ID_LENGTH = 32


def pack_arrays(**arrays: np.ndarray) -> bytes:
    """A job's input arrays as an uncompressed ``.npz``."""
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **arrays)
    return buffer.getvalue()


def unpack_arrays(payload: bytes) -> dict[str, np.ndarray]:
    """The arrays of ``pack_arrays`` (numeric only: never unpickled)."""
    with np.load(io.BytesIO(payload), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def create_job(session: Session, job_id: str, kind: str, calibrator: str | None, request: dict,
               payload: bytes | None) -> None:
    """A new queued job; finished jobs older than ``RETENTION`` are purged first."""
    session.execute(delete(JobRow).where(JobRow.status.in_(FINISHED), JobRow.updated_at < utcnow() - RETENTION))
    session.add(JobRow(id=job_id, kind=kind, status=JobStatus.QUEUED, percent=0.0, calibrator=calibrator,
                       request=request, payload=payload, step=JobStatus.QUEUED.value))


def withdraw(session: Session, job_id: str) -> bool:
    """Delete a job that is still queued (one its engine refused: nobody would ever run it); whether
    it was."""
    return rows_matched(session.execute(delete(JobRow).where(JobRow.id == job_id,
                                                             JobRow.status == JobStatus.QUEUED))) == 1


def count_active(session: Session) -> int:
    return session.execute(select(func.count()).select_from(JobRow).where(JobRow.status.in_(ACTIVE))).scalar_one()


def queued_ids(session: Session) -> list[str]:
    return list(session.scalars(select(JobRow.id).where(JobRow.status == JobStatus.QUEUED)
                                .order_by(JobRow.created_at)))


def claim(session: Session, job_id: str, worker: str) -> bool:
    """Move a queued job to running in ``worker``; False when it is not queued (taken,
    cancelled, gone)."""
    now = utcnow()
    result = session.execute(update(JobRow).where(JobRow.id == job_id, JobRow.status == JobStatus.QUEUED)
                             .values(status=JobStatus.RUNNING, started_at=now, updated_at=now, step="starting",
                                     worker=worker[:128]))
    return rows_matched(result) == 1


def load_input(session: Session, job_id: str) -> tuple[str, str | None, dict, bytes | None]:
    """Kind, calibrator name, request fields and payload of a job."""
    row = session.execute(select(JobRow.kind, JobRow.calibrator, JobRow.request, JobRow.payload)
                          .where(JobRow.id == job_id)).one()
    return row.kind, row.calibrator, row.request, row.payload


def update_job(session: Session, job_id: str, **values) -> None:
    """Set ``values`` on a job and beat its heartbeat."""
    session.execute(update(JobRow).where(JobRow.id == job_id).values(**values, updated_at=utcnow()))


def finish(session: Session, job_id: str, status: JobStatus, result: dict | None = None,
           error: dict | None = None) -> bool:
    """End a running job; False (nothing written) when it is no longer running: cancelled, or
    declared lost. The job's input is dropped with it."""
    now = utcnow()
    values: dict[str, Any] = {"status": status, "result": result, "error": error, "finished_at": now,
                              "updated_at": now, "payload": None, "step": status.value}
    if status == JobStatus.SUCCEEDED:
        values["percent"] = 100.0
    outcome = session.execute(update(JobRow).where(JobRow.id == job_id, JobRow.status == JobStatus.RUNNING)
                              .values(**values))
    return rows_matched(outcome) == 1


def request_cancel(session: Session, job_id: str) -> None:
    """A queued job is cancelled at once; a running one is asked to stop at its next progress
    point (``cancel_requested``)."""
    now = utcnow()
    cancelled = {"status": JobStatus.CANCELLED, "finished_at": now, "updated_at": now, "payload": None,
                 "step": JobStatus.CANCELLED.value}
    session.execute(update(JobRow).where(JobRow.id == job_id, JobRow.status == JobStatus.QUEUED).values(**cancelled))
    session.execute(update(JobRow).where(JobRow.id == job_id, JobRow.status == JobStatus.RUNNING)
                    .values(cancel_requested=True))


def cancel_requested(session: Session, job_id: str) -> bool:
    return bool(session.scalar(select(JobRow.cancel_requested).where(JobRow.id == job_id)))


def get_job(session: Session, job_id: str) -> JobRow | None:
    return session.get(JobRow, job_id) if len(job_id) <= MAX_ID_LENGTH else None


def list_jobs(session: Session, calibrator: str | None, status: str | None, limit: int) -> list[JobRow]:
    """The newest jobs first, optionally of one calibrator and one state."""
    query = select(JobRow).order_by(JobRow.created_at.desc()).limit(limit)
    if calibrator is not None:
        query = query.where(JobRow.calibrator == calibrator)
    if status is not None:
        query = query.where(JobRow.status == status)
    return list(session.scalars(query))


def counts_by_state(session: Session) -> dict[str, int]:
    rows = session.execute(select(JobRow.status, func.count()).group_by(JobRow.status))
    return {state: 0 for state in STATES} | {status: count for status, count in rows}


def finished_durations(session: Session) -> list[tuple[str, str, float]]:
    """``(kind, status, seconds)`` of the finished jobs still kept."""
    rows = session.execute(select(JobRow.kind, JobRow.status, JobRow.started_at, JobRow.finished_at)
                           .where(JobRow.status.in_(FINISHED), JobRow.started_at.is_not(None),
                                  JobRow.finished_at.is_not(None)))
    return [(kind, status, (finished - started).total_seconds()) for kind, status, started, finished in rows
            if started is not None and finished is not None]  # the query keeps only these


def fail_if_silent(session: Session, job_id: str, silent_since: datetime, error: dict) -> bool:
    """Mark a running job failed with ``error`` if its heartbeat is older than ``silent_since``
    (only if it still is: its worker may have finished it, or beaten, since it was read); True
    when this call marked it."""
    now = utcnow()
    return rows_matched(session.execute(
        update(JobRow).where(JobRow.id == job_id, JobRow.status == JobStatus.RUNNING, JobRow.updated_at < silent_since)
        .values(status=JobStatus.FAILED, error=error, updated_at=now, finished_at=now, payload=None,
                step=JobStatus.FAILED.value))) == 1
