"""Rows of the quality and monitoring features: the observation chunks with their
times (for windows and for feeding drift monitors in arrival order), the drift monitors, and the
logged predictions of the label-shift estimate. Every function takes a session from
``Database.read()`` or ``write()``; arrays come back through ``observation_store``'s readers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from ..observations.chunks import ChunkRef
from ..observations.store import byte_range, from_raw
from ..platform.rows import CalibratorRow, ObservationChunkRow, PredictionChunkRow
from .rows import DriftMonitorRow


@dataclass(frozen=True)
class ChunkFacts:
    """One observation chunk without its arrays; ``index_entry`` is its ref (reading from row ``skip``)."""

    id: int
    source: str
    version: int | None
    created_at: datetime
    n_rows: int
    dtype: str
    kind: str
    n_classes: int

    def index_entry(self, skip: int = 0) -> ChunkRef:
        return ChunkRef(self.id, self.n_rows, self.dtype, self.kind, self.n_classes, skip)


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
    rows = session.execute(
        select(CalibratorRow.name, DriftMonitorRow.version, DriftMonitorRow.signal, DriftMonitorRow.ece,
               DriftMonitorRow.log_e_value, DriftMonitorRow.alarm_rows.is_not(None))
        .join(CalibratorRow, CalibratorRow.id == DriftMonitorRow.calibrator_id)
        .order_by(CalibratorRow.name, DriftMonitorRow.version, DriftMonitorRow.signal))
    return [(name, version, signal, ece, log_e_value, alarmed)
            for name, version, signal, ece, log_e_value, alarmed in rows]


def coverage_states(session: Session, prefix: str) -> list[tuple[str, int, str, dict]]:
    """(calibrator name, version, signal, state) of every coverage alarm (signal starting ``prefix``)."""
    return [tuple(row) for row in session.execute(
        select(CalibratorRow.name, DriftMonitorRow.version, DriftMonitorRow.signal, DriftMonitorRow.state)
        .join(CalibratorRow, CalibratorRow.id == DriftMonitorRow.calibrator_id)
        .where(DriftMonitorRow.signal.startswith(prefix))
        .order_by(CalibratorRow.name, DriftMonitorRow.version, DriftMonitorRow.signal))]


# -- the prediction log -------------------------------------------------------------------------

def logged_versions(session: Session, calibrator_id: int) -> list[int]:
    """The versions whose served predictions were logged, ascending."""
    return list(session.scalars(select(PredictionChunkRow.version).distinct()
                                .where(PredictionChunkRow.calibrator_id == calibrator_id)
                                .order_by(PredictionChunkRow.version)))


def logged_chunk_facts(session: Session, calibrator_id: int, version: int,
                       after_id: int) -> list[tuple[int, int, int]]:
    """(id, rows, entries a row) of ``version``'s logged chunks with an id above ``after_id``, oldest first."""
    return [(row[0], row[1], 1 if row[3] == "scores" else row[2]) for row in session.execute(
        select(PredictionChunkRow.id, PredictionChunkRow.n_rows, PredictionChunkRow.n_classes,
               PredictionChunkRow.input_kind)
        .where(PredictionChunkRow.calibrator_id == calibrator_id, PredictionChunkRow.version == version,
               PredictionChunkRow.id > after_id).order_by(PredictionChunkRow.id))]


def logged_arrays(session: Session, ranges: list[tuple[int, int, int]]) -> tuple[str, np.ndarray]:
    """The input kind and the concatenated inputs of rows ``start`` to ``stop`` of each logged chunk
    of ``ranges`` (``(chunk id, start, stop)``, in that order), each range cut in the database."""
    arrays, kind = [], "logits"
    for chunk_id, start, stop in ranges:
        facts = session.execute(select(PredictionChunkRow.input_kind, PredictionChunkRow.n_classes,
                                       PredictionChunkRow.dtype).where(PredictionChunkRow.id == chunk_id)).first()
        if facts is None:  # deleted meanwhile (retention)
            continue
        kind, k, dtype = facts
        row_bytes = np.dtype(dtype).itemsize * (1 if kind == "scores" else k)
        cut = byte_range(PredictionChunkRow.inputs, start * row_bytes, (stop - start) * row_bytes)
        data = session.execute(select(cut).where(PredictionChunkRow.id == chunk_id)).scalar_one()
        arrays.append(from_raw(data, dtype, stop - start, k, kind))
    return kind, (np.concatenate(arrays) if arrays else np.empty((0, 0)))


def logged_inputs(session: Session, calibrator_id: int, version: int | None,
                  last: int) -> tuple[str, np.ndarray, np.ndarray] | None:
    """``(kind, inputs, serving versions)`` of exactly the newest ``last`` logged rows of
    ``calibrator_id`` (of one serving ``version`` if given), oldest first, or ``None`` without any:
    only the newest chunks that hold them are read, the oldest of those from its first row needed
    on (``observation_store.byte_range``), into one array allocated for the rows asked for."""
    where = [PredictionChunkRow.calibrator_id == calibrator_id]
    if version is not None:
        where.append(PredictionChunkRow.version == version)
    chosen, wanted = [], last
    facts = session.execute(select(PredictionChunkRow.id, PredictionChunkRow.n_rows, PredictionChunkRow.version,
                                   PredictionChunkRow.input_kind, PredictionChunkRow.n_classes,
                                   PredictionChunkRow.dtype)
                            .where(*where).order_by(PredictionChunkRow.id.desc()))
    for chunk_id, n_rows, served_by, kind, k, dtype in facts:
        if wanted <= 0:
            break
        skip = max(n_rows - wanted, 0)
        chosen.append((chunk_id, n_rows, skip, served_by, kind, k, dtype))
        wanted -= n_rows - skip
    if not chosen:
        return None
    chosen.reverse()
    kind, k = chosen[-1][4], chosen[-1][5]
    chosen = [entry for entry in chosen if (entry[4], entry[5]) == (kind, k)]  # the newest shape only
    n = sum(n_rows - skip for _, n_rows, skip, *_ in chosen)
    inputs = np.empty((n,) if kind == "scores" else (n, k), dtype=np.float64)
    versions = np.empty(n, dtype=np.int64)
    at = 0
    for chunk_id, n_rows, skip, served_by, _, _, dtype in chosen:
        row_bytes = np.dtype(dtype).itemsize * (1 if kind == "scores" else k)
        take = n_rows - skip
        data = session.execute(select(byte_range(PredictionChunkRow.inputs, skip * row_bytes, take * row_bytes))
                               .where(PredictionChunkRow.id == chunk_id)).scalar_one()
        inputs[at:at + take] = from_raw(data, dtype, take, k, kind)
        versions[at:at + take] = served_by
        at += take
        del data
    return kind, inputs, versions
