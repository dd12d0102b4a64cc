"""The tables of safe promotion: which aliases need evidence to move, every alias move, and the
stored challenger evaluations. They share ``Base`` (and so the metadata Alembic compares, through
``app.all_rows``). Every row goes with its calibrator (``ON DELETE CASCADE``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from ..platform.rows import Base, UTCDateTime, utcnow


class AliasGateRow(Base):
    """An alias that moves only with an evaluation whose verdict favours the new version."""

    __tablename__ = "alias_gates"

    calibrator_id: Mapped[int] = mapped_column(ForeignKey("calibrators.id", ondelete="CASCADE"), primary_key=True)
    alias: Mapped[str] = mapped_column(String(64), primary_key=True)
    require_evaluation: Mapped[bool] = mapped_column(Boolean, default=False)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class AliasMoveRow(Base):
    """One move of an alias: ``action`` set, rollback or delete; from and to versions (null: the
    alias did not exist before, or was deleted); who (the API key id, when keys are on), when, and
    the evaluation that justified it."""

    __tablename__ = "alias_moves"
    __table_args__ = (Index("ix_alias_moves_calibrator_alias", "calibrator_id", "alias", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    calibrator_id: Mapped[int] = mapped_column(ForeignKey("calibrators.id", ondelete="CASCADE"))
    alias: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(16))
    from_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    to_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    actor: Mapped[str | None] = mapped_column(String(64), nullable=True)
    evaluation_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    moved_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class EvaluationRow(Base):
    """A challenger evaluation: two versions compared on the same held-out observations, with
    ``result`` the JSON answer (differences, confidence sequences, ECE intervals, verdict)."""

    __tablename__ = "evaluations"
    __table_args__ = (Index("ix_evaluations_calibrator_created", "calibrator_id", "created_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    calibrator_id: Mapped[int] = mapped_column(ForeignKey("calibrators.id", ondelete="CASCADE"))
    challenger: Mapped[int] = mapped_column(Integer)
    champion: Mapped[int] = mapped_column(Integer)
    alpha: Mapped[float] = mapped_column(Float)
    n_rows: Mapped[int] = mapped_column(Integer)
    verdict: Mapped[str] = mapped_column(String(32))
    result: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class RefitPolicyRow(Base):
    """When and how to refit a calibrator (``config``: ``app.promotion.values.PolicySpec.to_dict()``, the
    JSON ``RefitPolicy`` writes), and the last time the policy submitted a refit (``last_run_at``, its job
    ``last_job_id``)."""

    __tablename__ = "refit_policies"

    calibrator_id: Mapped[int] = mapped_column(ForeignKey("calibrators.id", ondelete="CASCADE"), primary_key=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_run_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_job_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
