"""What the other domains read of the observations inside their own transaction: the index of
the selected chunks (``chunk_index``, ``newest_within``: ``ChunkRef`` values, without arrays), their
rows (``load``), the chunks with their times (``observation_chunks``: for quality windows and for
feeding drift monitors in arrival order), the versions that served labelled rows
(``served_versions``) or each chunk (``chunk_versions``), the rows stored since a time and the
chunks' times (for refit policies), each calibrator's newest chunk (for the scheduler), and the
retention that deletes old chunks (``delete_before``). Each call takes the caller's session; the
observations' store and rows stay their own. A selection is given by keyword: the newest ``last``
rows, those created in [``since``, ``until``), of one ``source`` (upload or feedback) or served by
one ``version``."""

from __future__ import annotations

from datetime import datetime

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..platform.sql import IN_LIST
from . import store
from .chunks import ChunkFacts, ChunkRef
from .rows import ObservationChunkRow


def chunk_index(session: Session, calibrator_id: int, **selection) -> list[ChunkRef]:
    """The selected chunks of ``calibrator_id``, oldest first (with ``last``, only the newest chunks
    that hold those rows)."""
    return store.chunk_index(session, calibrator_id, store.Selection(**selection))


def newest_within(session: Session, calibrator_id: int, rows: int, budget: int, **selection) -> list[ChunkRef]:
    """The index of the newest ``rows`` selected observations, fewer where their entries (rows x
    classes) would be over the read budget ``budget`` (``CALIBRATION_MAX_READ_ENTRIES``)."""
    return store.newest_within(session, calibrator_id, rows, budget, **selection)


def load(session: Session, index: list[ChunkRef], dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    """The inputs (as ``dtype``) and labels (int64) of the chunks in ``index``, concatenated."""
    return store.load(session, index, dtype)


def delete_before(session: Session, calibrator_id: int | None, before: datetime) -> int:
    """Delete the observation chunks created before ``before`` (of one calibrator, or of all);
    returns the rows removed."""
    return store.delete_before(session, calibrator_id, before)


def observation_chunks(session: Session, calibrator_id: int, source: str | None = None,
                       version: int | None = None, after_id: int = 0) -> list[ChunkFacts]:
    """The chunks of ``calibrator_id`` (of one ``source`` / serving ``version`` if given) with an id
    above ``after_id``, in arrival order (ids grow with every append)."""
    where = [ObservationChunkRow.calibrator_id == calibrator_id, ObservationChunkRow.id > after_id]
    if source is not None:
        where.append(ObservationChunkRow.source == source)
    if version is not None:
        where.append(ObservationChunkRow.version == version)
    rows = session.execute(
        select(ObservationChunkRow.id, ObservationChunkRow.source, ObservationChunkRow.version,
               ObservationChunkRow.created_at, ObservationChunkRow.n_rows, ObservationChunkRow.dtype,
               ObservationChunkRow.input_kind, ObservationChunkRow.n_classes)
        .where(*where).order_by(ObservationChunkRow.id)).all()
    return [ChunkFacts(*row) for row in rows]


def served_versions(session: Session, calibrator_id: int) -> list[int]:
    """The versions that served labelled rows (feedback observations), ascending."""
    return list(session.scalars(
        select(ObservationChunkRow.version).distinct()
        .where(ObservationChunkRow.calibrator_id == calibrator_id, ObservationChunkRow.source == "feedback",
               ObservationChunkRow.version.is_not(None))
        .order_by(ObservationChunkRow.version)))


def rows_since(session: Session, calibrator_id: int, since: datetime) -> int:
    """How many observation rows of ``calibrator_id`` were stored after ``since``."""
    return session.scalar(select(func.coalesce(func.sum(ObservationChunkRow.n_rows), 0)).where(
        ObservationChunkRow.calibrator_id == calibrator_id, ObservationChunkRow.created_at > since))


def row_times(session: Session, calibrator_id: int, limit: int = 100_000):
    """``(n_rows, created_at)`` of the newest ``limit`` observation chunks of ``calibrator_id``, newest first."""
    return session.execute(select(ObservationChunkRow.n_rows, ObservationChunkRow.created_at)
                           .where(ObservationChunkRow.calibrator_id == calibrator_id)
                           .order_by(ObservationChunkRow.created_at.desc()).limit(limit))


def chunk_versions(session: Session, chunk_ids: list[int]) -> dict[int, int | None]:
    """The serving version of each observation chunk (feedback), by chunk id."""
    found: dict[int, int | None] = {}
    for start in range(0, len(chunk_ids), IN_LIST):
        part = chunk_ids[start:start + IN_LIST]
        found.update(session.execute(select(ObservationChunkRow.id, ObservationChunkRow.version)
                                     .where(ObservationChunkRow.id.in_(part))).all())
    return found


def newest_chunk_ids(session: Session) -> dict[int, int]:
    """``{calibrator id: its newest observation chunk's id}`` of every calibrator with observations."""
    return dict(session.execute(select(ObservationChunkRow.calibrator_id, func.max(ObservationChunkRow.id))
                                .group_by(ObservationChunkRow.calibrator_id)).all())
