"""Persistence of alias moves (each one recorded), alias gates, refit policies and stored
evaluations. Every function takes a session from ``Database.read()`` or ``write()``. The aliases
themselves and the /v2 default are the registry's (``app.registry.reads``: ``locked_calibrator``,
``point_alias``, ``set_v2_default``, ...)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..platform.errors import NotFound
from ..platform.rows import utcnow
from ..platform.sql import dialect_insert
from ..registry import reads as registry
from .rows import AliasGateRow, AliasMoveRow, EvaluationRow, RefitPolicyRow


def record_move(session: Session, calibrator_id: int, alias: str, action: str, from_version: int | None,
                to_version: int | None, actor: str | None, evaluation_id: str | None) -> AliasMoveRow:
    row = AliasMoveRow(calibrator_id=calibrator_id, alias=alias, action=action, from_version=from_version,
                       to_version=to_version, actor=actor, evaluation_id=evaluation_id, moved_at=utcnow())
    session.add(row)
    session.flush()
    return row


def move_view(row: AliasMoveRow) -> dict:
    return {"id": row.id, "alias": row.alias, "action": row.action, "from_version": row.from_version,
            "to_version": row.to_version, "actor": row.actor, "evaluation": row.evaluation_id,
            "moved_at": row.moved_at}


def last_move(session: Session, calibrator_id: int, alias: str) -> AliasMoveRow | None:
    return session.scalar(select(AliasMoveRow).where(AliasMoveRow.calibrator_id == calibrator_id,
                                                     AliasMoveRow.alias == alias)
                          .order_by(AliasMoveRow.id.desc()).limit(1))


def moves(session: Session, calibrator_id: int, alias: str, limit: int) -> list[AliasMoveRow]:
    """The newest ``limit`` moves of an alias, newest first."""
    return list(session.scalars(select(AliasMoveRow).where(AliasMoveRow.calibrator_id == calibrator_id,
                                                           AliasMoveRow.alias == alias)
                                .order_by(AliasMoveRow.id.desc()).limit(limit)))


def gate(session: Session, calibrator_id: int, alias: str) -> bool:
    return bool(session.scalar(select(AliasGateRow.require_evaluation).where(
        AliasGateRow.calibrator_id == calibrator_id, AliasGateRow.alias == alias)))


def set_gate(session: Session, calibrator_id: int, alias: str, require_evaluation: bool) -> None:
    now = utcnow()
    session.execute(
        dialect_insert(session)(AliasGateRow)
        .values(calibrator_id=calibrator_id, alias=alias, require_evaluation=require_evaluation, updated_at=now)
        .on_conflict_do_update(index_elements=["calibrator_id", "alias"],
                               set_={"require_evaluation": require_evaluation, "updated_at": now}))


def add_evaluation(session: Session, row: EvaluationRow) -> None:
    session.add(row)
    session.flush()


def evaluation(session: Session, name: str, evaluation_id: str) -> EvaluationRow:
    calibrator = registry.calibrator(session, name)
    row = session.scalar(select(EvaluationRow).where(EvaluationRow.id == evaluation_id,
                                                     EvaluationRow.calibrator_id == calibrator.id))
    if row is None:
        raise NotFound(f"calibrator {name!r} has no evaluation {evaluation_id!r}")
    return row


def recent_evaluations(session: Session, name: str, limit: int) -> list[EvaluationRow]:
    """The newest ``limit`` evaluations of ``name``, newest first."""
    calibrator = registry.calibrator(session, name)
    return list(session.scalars(select(EvaluationRow).where(EvaluationRow.calibrator_id == calibrator.id)
                                .order_by(EvaluationRow.created_at.desc()).limit(limit)))


def set_last_job(session: Session, calibrator_id: int, job_id: str) -> None:
    row = session.get(RefitPolicyRow, calibrator_id)
    if row is not None:
        row.last_job_id = job_id


def version_created_at(session: Session, resolved) -> datetime:
    return registry.version_created(session, resolved)


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text)
