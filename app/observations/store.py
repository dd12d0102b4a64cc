"""Persistence of observations (labelled rows in binary chunks), on SQLite and Postgres alike
(the prediction log's is ``app.prediction_log.store``).

A chunk holds its rows as one raw little-endian array (``dtype``, C order) and, for
observations, the labels as int32: never one row per float, never a pickle (``np.frombuffer``
reads them back). Every function takes a session from ``Database.read()`` or ``write()``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from ..platform.rows import utcnow
from ..platform.sql import byte_range, from_raw, raw
from ..registry import reads as registry
from .chunks import ChunkRef, total_rows
from .rows import ObservationChunkRow

LABEL_DTYPE = np.dtype("<i4")


def shape_of(session: Session, calibrator_id: int) -> tuple[str, int] | None:
    """The input kind and class count of ``calibrator_id``'s observations or, without any, of its
    latest version (what new observations must match), or ``None``."""
    row = session.execute(select(ObservationChunkRow.input_kind, ObservationChunkRow.n_classes)
                          .where(ObservationChunkRow.calibrator_id == calibrator_id).limit(1)).first()
    if row is None:
        return registry.latest_shape(session, calibrator_id)
    return row[0], row[1]


def totals(session: Session, calibrator_id: int) -> tuple[int, int]:
    """Rows and bytes of ``calibrator_id``'s observations."""
    rows, size = session.execute(
        select(func.coalesce(func.sum(ObservationChunkRow.n_rows), 0),
               func.coalesce(func.sum(func.length(ObservationChunkRow.inputs)), 0))
        .where(ObservationChunkRow.calibrator_id == calibrator_id)).one()
    return int(rows), int(size)


def append(session: Session, calibrator_id: int, source: str, version: int | None, kind: str, n_classes: int,
           inputs: np.ndarray, labels: np.ndarray, created_at: datetime | None = None) -> ObservationChunkRow:
    data, dtype = raw(inputs)
    row = ObservationChunkRow(
        calibrator_id=calibrator_id, source=source, version=version, input_kind=kind, n_rows=len(labels),
        n_classes=n_classes, dtype=dtype, class_counts=np.bincount(labels, minlength=n_classes).tolist(),
        inputs=data, labels=np.ascontiguousarray(labels, dtype=LABEL_DTYPE).tobytes(),
        created_at=created_at or utcnow())
    session.add(row)
    session.flush()
    return row


@dataclass(frozen=True)
class Selection:
    """Which observations: the newest ``last`` rows, those created in [since, until), of one
    ``source`` or served by one ``version`` (feedback); ``None`` means no restriction."""

    last: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    source: str | None = None
    version: int | None = None

    def where(self, calibrator_id: int) -> list:
        clauses = [ObservationChunkRow.calibrator_id == calibrator_id]
        if self.since is not None:
            clauses.append(ObservationChunkRow.created_at >= self.since)
        if self.until is not None:
            clauses.append(ObservationChunkRow.created_at < self.until)
        if self.source is not None:
            clauses.append(ObservationChunkRow.source == self.source)
        if self.version is not None:
            clauses.append(ObservationChunkRow.version == self.version)
        return clauses


def chunk_index(session: Session, calibrator_id: int, selection: Selection) -> list[ChunkRef]:
    """The selected chunks, oldest first, without their arrays; with ``last``, only the newest chunks
    that hold those rows (the oldest of them from the row it starts at)."""
    rows = session.execute(
        select(ObservationChunkRow.id, ObservationChunkRow.n_rows, ObservationChunkRow.dtype,
               ObservationChunkRow.input_kind, ObservationChunkRow.n_classes)
        .where(*selection.where(calibrator_id)).order_by(ObservationChunkRow.id)).all()
    index = [ChunkRef(*row) for row in rows]
    if selection.last is not None:
        kept, wanted = [], selection.last
        for entry in reversed(index):
            if wanted <= 0:
                break
            skip = max(entry.n_rows - wanted, 0)
            kept.append(replace(entry, skip=skip))
            wanted -= entry.n_rows - skip
        index = kept[::-1]
    return index


def newest_within(session: Session, calibrator_id: int, rows: int, budget: int, **selection) -> list[ChunkRef]:
    """The index of the newest ``rows`` selected observations, fewer where their entries (rows x
    classes) would be over the read budget ``budget`` (``CALIBRATION_MAX_READ_ENTRIES``)."""
    index = chunk_index(session, calibrator_id, Selection(last=rows, **selection))
    if index and index_rows(index) * index[0].n_classes > budget:
        index = chunk_index(session, calibrator_id, Selection(last=max(budget // index[0].n_classes, 1), **selection))
    return index


def index_rows(index: list[ChunkRef]) -> int:
    """How many rows the chunks of ``index`` select."""
    return total_rows(index)


def load(session: Session, index: list[ChunkRef], dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    """The inputs and labels of the chunks in ``index``, concatenated as ``dtype`` (float64: what
    the core validates them to, so no second copy is made): one output array is allocated and
    each chunk's selected rows are read and copied into it in turn (peak: the output plus the
    selected rows of one chunk)."""
    n = index_rows(index)
    kind, k = index[0].kind, index[0].n_classes
    inputs = np.empty((n,) if kind == "scores" else (n, k), dtype=dtype)
    labels = np.empty(n, dtype=np.int64)
    at = 0
    for ref in index:
        chunk_id, chunk_dtype, skip, take = ref.id, ref.dtype, ref.skip, ref.rows
        row_bytes = np.dtype(chunk_dtype).itemsize * (1 if kind == "scores" else k)
        data, label_bytes = session.execute(
            select(byte_range(ObservationChunkRow.inputs, skip * row_bytes, take * row_bytes),
                   byte_range(ObservationChunkRow.labels, skip * LABEL_DTYPE.itemsize, take * LABEL_DTYPE.itemsize))
            .where(ObservationChunkRow.id == chunk_id)).one()
        inputs[at:at + take] = from_raw(data, chunk_dtype, take, k, kind)
        labels[at:at + take] = np.frombuffer(label_bytes, dtype=LABEL_DTYPE)
        at += take
        del data, label_bytes
    return inputs, labels


def chunk_facts(session: Session, calibrator_id: int) -> list:
    """(source, version, created_at, n_rows, class_counts) of every observation chunk, for summaries."""
    return session.execute(
        select(ObservationChunkRow.source, ObservationChunkRow.version, ObservationChunkRow.created_at,
               ObservationChunkRow.n_rows, ObservationChunkRow.class_counts)
        .where(ObservationChunkRow.calibrator_id == calibrator_id).order_by(ObservationChunkRow.id)).all()


def delete_before(session: Session, calibrator_id: int | None, before: datetime) -> int:
    """Delete observation chunks created before ``before`` (of one calibrator, or of all); returns
    the rows removed."""
    where = [ObservationChunkRow.created_at < before]
    if calibrator_id is not None:
        where.append(ObservationChunkRow.calibrator_id == calibrator_id)
    removed = session.scalar(select(func.coalesce(func.sum(ObservationChunkRow.n_rows), 0)).where(*where))
    session.execute(delete(ObservationChunkRow).where(*where))
    return int(removed)
