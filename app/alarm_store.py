"""Rows of the quality and monitoring features (issue #20): the observation chunks with their
times (for windows and for feeding drift monitors in arrival order), the drift monitors, and the
logged predictions of the label-shift estimate. Every function takes a session from
``Database.read()`` or ``write()``; arrays come back through ``observation_store``'s readers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from .alarm_models import DriftMonitorRow
from .models import CalibratorRow, ObservationChunkRow, PredictionChunkRow
from .observation_store import from_raw


@dataclass(frozen=True)
class ChunkFacts:
    """One observation chunk without its arrays; ``index_entry`` is its ``observation_store``
    index entry (reading from row ``skip``)."""

    id: int
    source: str
    version: int | None
    created_at: datetime
    n_rows: int
    dtype: str
    kind: str
    n_classes: int

    def index_entry(self, skip: int = 0) -> tuple:
        return (self.id, self.n_rows, self.dtype, self.kind, self.n_classes, skip)


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


# -- drift monitors -----------------------------------------------------------------------------

def monitor(session: Session, calibrator_id: int, version: int, signal: str) -> DriftMonitorRow | None:
    return session.scalar(select(DriftMonitorRow).where(DriftMonitorRow.calibrator_id == calibrator_id,
                                                        DriftMonitorRow.version == version,
                                                        DriftMonitorRow.signal == signal))


def monitors(session: Session, calibrator_id: int) -> list[DriftMonitorRow]:
    return list(session.scalars(select(DriftMonitorRow).where(DriftMonitorRow.calibrator_id == calibrator_id)
                                .order_by(DriftMonitorRow.version, DriftMonitorRow.signal)))


def every_monitor(session: Session) -> list[tuple[str, int, str, float | None, float, bool]]:
    """(calibrator name, version, signal, ece, log e-value, alarmed) of every monitor, for /metrics."""
    return [tuple(row) for row in session.execute(
        select(CalibratorRow.name, DriftMonitorRow.version, DriftMonitorRow.signal, DriftMonitorRow.ece,
               DriftMonitorRow.log_e_value, DriftMonitorRow.alarm_rows.is_not(None))
        .join(CalibratorRow, CalibratorRow.id == DriftMonitorRow.calibrator_id)
        .order_by(CalibratorRow.name, DriftMonitorRow.version, DriftMonitorRow.signal))]


# -- the prediction log -------------------------------------------------------------------------

def logged_versions(session: Session, calibrator_id: int) -> list[int]:
    """The versions whose served predictions were logged, ascending."""
    return list(session.scalars(select(PredictionChunkRow.version).distinct()
                                .where(PredictionChunkRow.calibrator_id == calibrator_id)
                                .order_by(PredictionChunkRow.version)))


def logged_chunk_facts(session: Session, calibrator_id: int, version: int, after_id: int) -> list[tuple[int, int]]:
    """(id, rows x classes) of ``version``'s logged chunks with an id above ``after_id``, oldest first."""
    return [(row[0], row[1] * row[2]) for row in session.execute(
        select(PredictionChunkRow.id, PredictionChunkRow.n_rows, PredictionChunkRow.n_classes)
        .where(PredictionChunkRow.calibrator_id == calibrator_id, PredictionChunkRow.version == version,
               PredictionChunkRow.id > after_id).order_by(PredictionChunkRow.id))]


def logged_arrays(session: Session, chunk_ids: list[int]) -> tuple[str, np.ndarray]:
    """The input kind and the concatenated inputs of the logged chunks ``chunk_ids`` (in that order)."""
    chunks = {chunk.id: chunk for chunk in session.scalars(
        select(PredictionChunkRow).where(PredictionChunkRow.id.in_(chunk_ids)))}
    arrays = [from_raw(chunks[i].inputs, chunks[i].dtype, chunks[i].n_rows, chunks[i].n_classes,
                       chunks[i].input_kind) for i in chunk_ids if i in chunks]
    kind = chunks[chunk_ids[0]].input_kind if chunks else "logits"
    return kind, (np.concatenate(arrays) if arrays else np.empty((0, 0)))

def logged_inputs(session: Session, calibrator_id: int, version: int | None, last: int) -> list[tuple]:
    """``(version, kind, n_classes, inputs)`` of the newest logged chunks of ``calibrator_id`` (of
    one serving ``version`` if given) holding at least ``last`` rows, oldest first."""
    where = [PredictionChunkRow.calibrator_id == calibrator_id]
    if version is not None:
        where.append(PredictionChunkRow.version == version)
    chosen, rows = [], 0
    facts = session.execute(select(PredictionChunkRow.id, PredictionChunkRow.n_rows).where(*where)
                            .order_by(PredictionChunkRow.id.desc())).all()
    for chunk_id, n_rows in facts:
        if rows >= last:
            break
        chosen.append(chunk_id)
        rows += n_rows
    out = []
    for chunk in session.scalars(select(PredictionChunkRow).where(PredictionChunkRow.id.in_(chosen))
                                 .order_by(PredictionChunkRow.id)):
        array = from_raw(chunk.inputs, chunk.dtype, chunk.n_rows, chunk.n_classes, chunk.input_kind)
        out.append((chunk.version, chunk.input_kind, chunk.n_classes, np.asarray(array)))
    return out
