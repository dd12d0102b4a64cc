"""Rows an online calibrator's updates read: the calibrator's row lock that orders observation
writes, the newest version, and the observation chunks stored after a watermark. Every function
takes a session from ``Database.write()``."""

from __future__ import annotations

from sqlalchemy import Row, func, select
from sqlalchemy.orm import Session

from ..platform.rows import CalibratorRow, ObservationChunkRow, VersionRow
from .chunks import ChunkRef


def lock_calibrator(session: Session, calibrator_id: int) -> None:
    """Hold the calibrator's row until the transaction ends (``FOR NO KEY UPDATE`` on Postgres,
    which the foreign keys' ``FOR KEY SHARE`` of inserts do not block; SQLite's write transactions
    are serialised already), so that observation chunks of one calibrator commit in id order."""
    session.execute(select(CalibratorRow.id).where(CalibratorRow.id == calibrator_id).with_for_update(key_share=True))


def latest_version(session: Session, calibrator_id: int) -> Row[int, str] | None:
    """(row id, method) of the calibrator's newest version, without its parameters."""
    return session.execute(select(VersionRow.id, VersionRow.method).where(VersionRow.calibrator_id == calibrator_id)
                           .order_by(VersionRow.version.desc()).limit(1)).first()


def last_chunk_id(session: Session, calibrator_id: int) -> int:
    """The id of the calibrator's newest observation chunk, 0 if it has none."""
    return session.scalar(select(func.max(ObservationChunkRow.id))
                          .where(ObservationChunkRow.calibrator_id == calibrator_id)) or 0


def chunks_after(session: Session, calibrator_id: int, chunk_id: int) -> list[ChunkRef]:
    """The refs of the chunks stored after ``chunk_id``, oldest first."""
    rows = session.execute(
        select(ObservationChunkRow.id, ObservationChunkRow.n_rows, ObservationChunkRow.dtype,
               ObservationChunkRow.input_kind, ObservationChunkRow.n_classes)
        .where(ObservationChunkRow.calibrator_id == calibrator_id, ObservationChunkRow.id > chunk_id)
        .order_by(ObservationChunkRow.id)).all()
    return [ChunkRef(*row) for row in rows]
