"""The table of the jobs: long work (a fit, a comparison) run in the background, with its input,
progress and outcome."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Float, Index, LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from ..platform.rows import Base, UTCDateTime, utcnow


class JobRow(Base):
    """Long work (a fit, a comparison) run in the background: its input, progress and outcome.

    ``status`` is queued, running, succeeded, failed or cancelled; ``step`` says what a running
    job is doing, ``worker`` which process (host:pid) runs it; ``updated_at`` is its heartbeat.
    ``payload`` is its input (an ``.npz`` of the validated arrays) and ``request`` its small
    fields; ``result`` is the response body it would have returned, ``error`` a problem document."""

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_status_created_at", "status", "created_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16))
    percent: Mapped[float] = mapped_column(Float)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)
    calibrator: Mapped[str | None] = mapped_column(String(128), nullable=True, index=True)
    step: Mapped[str | None] = mapped_column(String(128), nullable=True)
    worker: Mapped[str | None] = mapped_column(String(128), nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    request: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    payload: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True, deferred=True)
