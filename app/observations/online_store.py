"""Rows an online calibrator's updates read: the newest observation chunk and the chunks stored
after a watermark (the calibrator's row lock and its newest version are the registry's:
``app.registry.reads``). Every function takes a session from ``Database.write()``."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from .chunks import ChunkRef
from .rows import ObservationChunkRow


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
