"""What the other domains read of the prediction log inside their own transaction: for the
observations' labels and summaries, a calibrator's logged predictions and how many have their label,
the rows it holds and dropped for being full, and the inputs of chosen rows of logged chunks; for the
drift monitors and the label-shift estimate, the versions logged, their chunks after a watermark,
ranges of their inputs and the newest logged inputs; for the scheduler, each calibrator's newest
logged chunk. Each call takes the caller's session; the log's
store and rows stay its own (finding and claiming ids: ``app.prediction_log.lookup``)."""

from __future__ import annotations

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..platform.sql import byte_range, from_raw
from . import store
from .rows import PredictionChunkRow


def logged_counts(session: Session, calibrator_id: int) -> tuple[int, int]:
    """Logged predictions of a calibrator, and how many of them have their label."""
    return store.logged_counts(session, calibrator_id)


def log_state(session: Session, calibrator_id: int) -> tuple[int, int]:
    """The calibrator's logged rows and the rows its full log dropped."""
    return store.log_state(session, calibrator_id)


def prediction_rows(session: Session, wanted: dict[int, set[int]]) -> dict[int, tuple]:
    """``{chunk_id: (version, kind, n_classes, {row: inputs})}`` of the rows ``wanted`` of logged
    chunks (``{chunk_id: rows}``), each run of consecutive rows cut from its chunk in the database."""
    return store.prediction_rows(session, wanted)


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
        data = session.scalar(select(byte_range(PredictionChunkRow.inputs, start * row_bytes,
                                                (stop - start) * row_bytes)).where(PredictionChunkRow.id == chunk_id))
        arrays.append(from_raw(data, dtype, stop - start, k, kind))
    return kind, (np.concatenate(arrays) if arrays else np.empty((0, 0)))


def logged_inputs(session: Session, calibrator_id: int, version: int | None,
                  last: int) -> tuple[str, np.ndarray, np.ndarray] | None:
    """``(kind, inputs, serving versions)`` of exactly the newest ``last`` logged rows of
    ``calibrator_id`` (of one serving ``version`` if given), oldest first, or ``None`` without any:
    only the newest chunks that hold them are read, the oldest of those from its first row needed
    on (``app.platform.sql.byte_range``), into one array allocated for the rows asked for."""
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
        data = session.scalar(select(byte_range(PredictionChunkRow.inputs, skip * row_bytes, take * row_bytes))
                              .where(PredictionChunkRow.id == chunk_id))
        inputs[at:at + take] = from_raw(data, dtype, take, k, kind)
        versions[at:at + take] = served_by
        at += take
        del data
    return kind, inputs, versions


def newest_chunk_ids(session: Session) -> dict[int, int]:
    """``{calibrator id: its newest logged chunk's id}`` of every calibrator with logged predictions."""
    return dict(session.execute(select(PredictionChunkRow.calibrator_id, func.max(PredictionChunkRow.id))
                                .group_by(PredictionChunkRow.calibrator_id)).all())
