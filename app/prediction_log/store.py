"""Persistence of the prediction log: logged inputs in binary chunks with their prediction ids
(an index row per client id, one per batch of generated ids), on SQLite and Postgres alike.

A chunk holds its rows as one raw little-endian array (``app.platform.sql.raw``), never a
pickle. Every function takes a session from ``Database.read()`` or ``write()``.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import orjson
from sqlalchemy import Integer, Table, cast, delete, func, insert, select
from sqlalchemy.orm import Session

from ..platform.rows import utcnow
from ..platform.sql import byte_range, from_raw, raw_view
from ..registry import reads as registry
from ..registry import writes as registry_writes
from . import epoch_store as prediction_epoch_store
from .rows import LoggedPredictionRow, PredictionChunkRow

BATCH_MARK = ","  # no client id holds one: ``<prefix>,`` is the row of a batch of generated ids
GENERATED = re.compile(r"([0-9a-f]{16}-)(0|[1-9][0-9]{0,8})")  # app.prediction_log.service.new_prefix
IDS_PER_STATEMENT = 50_000  # client ids unpacked by one statement (a bounded parameter)


def index_keys(ids: Sequence[str | None], batches: Sequence[tuple[str, int, int]] = ()) -> list[str]:
    """The ``prediction_id`` of every index row ``log_predictions`` writes for ``ids`` and ``batches``:
    the client ids (not ``None``), then each batch's ``<prefix>,``."""
    return [pid for pid in ids if pid is not None] + [prefix + BATCH_MARK for prefix, _, _ in batches]


def log_predictions(session: Session, calibrator_id: int, version: int, kind: str, n_classes: int,
                    inputs: np.ndarray, ids: Sequence[str | None],
                    batches: Sequence[tuple[str, int, int]] = (), epoch_id: int | None = None) -> int:
    """Store one chunk of logged inputs with their ids, in the index's epoch ``epoch_id`` (an open
    one, ``app.prediction_log.epochs``; ``None``: a new epoch of its own): ``ids``, the client ids of
    rows 0, 1, ..., one index row each (an id already in the epoch keeps its row there; an id in
    an earlier epoch gets a row here too, and a lookup joins its first chunk; a row whose id is
    ``None`` gets none), and ``batches`` of generated ids as ``(prefix, first row, n)``, one index row per batch
    (migration 0009): ids ``prefix0`` to ``prefix{n-1}`` at rows ``first`` to ``first + n - 1``.
    At 64 rows a request that is 64 times fewer B-tree inserts. Returns the index rows written."""
    if epoch_id is None:
        epoch_id = prediction_epoch_store.open_epoch(session, calibrator_id)
    # the array's own bytes as the blob, not a copy (``raw``'s ``tobytes``): the driver copies them
    # once more when it binds them, and a flush at 100% is ~1.6 MB, copied ~8 times on its way
    data, dtype = raw_view(inputs)
    # a Core insert on the table: the ORM's bulk-insert path cost ~1.7 ms a flush, for one row
    chunks = typing.cast(Table, PredictionChunkRow.__table__)  # a declarative class's table, typed as any FROM clause
    connection = session.connection()
    chunk_id = connection.execute(insert(chunks).returning(chunks.c.id), {
        "calibrator_id": calibrator_id, "version": version, "input_kind": kind, "n_rows": len(inputs),
        "n_classes": n_classes, "dtype": dtype, "inputs": data, "created_at": utcnow()}).scalar_one()
    columns = ("INSERT INTO logged_predictions (calibrator_id, epoch_id, prediction_id, chunk_id, row, labelled, "
               "n_rows, kept) ")
    conflict = " ON CONFLICT (calibrator_id, epoch_id, prediction_id) DO NOTHING"
    inserted = 0
    # the client ids in statements that unpack an array in the database (IDS_PER_STATEMENT at a
    # time): per id, half the CPU of the driver's executemany, which converts each row's
    # parameters in Python. In id order, then row order (a duplicate's first row wins): on
    # Postgres so that two processes logging the same ids lock them in the same order (no
    # deadlock); on SQLite because B-tree inserts in key order walk the epoch's pages once instead
    # of seeking a random page each (a third less a random id: benchmarks/results/id_index_keys.md)
    #
    # On Postgres an id already in the epoch is left out by ``NOT EXISTS`` (and a repeat in the array
    # by ``DISTINCT ON``), not by ``ON CONFLICT``, whose speculative insertion cost ~1.1 us more an id
    # (benchmarks/results/id_insert_postgres.md). Nothing else inserts these keys into this epoch
    # meanwhile: an epoch has one writer, labels insert only generated ids' rows (a client id of
    # that form is refused), so no insert of the same key is in flight. Were one, the primary key
    # would refuse the statement and the flush would fail (its rows counted), not store a second row.
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        unpack = ("SELECT ?, ?, value, ?, key + ?, 0, 1, NULL FROM json_each(?) WHERE value IS NOT NULL "
                  "ORDER BY value, key" + conflict)
    else:
        unpack = ("SELECT %s, %s, d.id, %s, d.ord - 1 + %s, false, 1, NULL FROM (SELECT DISTINCT ON (u.id) u.id, "
                  "u.ord FROM unnest(%s::text[]) WITH ORDINALITY AS u(id, ord) WHERE u.id IS NOT NULL "
                  "ORDER BY u.id, u.ord) AS d WHERE NOT EXISTS (SELECT 1 FROM logged_predictions AS l "
                  "WHERE l.calibrator_id = %s AND l.epoch_id = %s AND l.prediction_id = d.id) ORDER BY d.id")
    for start in range(0, len(ids), IDS_PER_STATEMENT):
        part = ids[start:start + IDS_PER_STATEMENT]
        array = orjson.dumps(part).decode() if sqlite else part
        parameters: tuple[Any, ...] = (calibrator_id, epoch_id, chunk_id, start, array)
        if not sqlite:
            parameters += (calibrator_id, epoch_id)
        inserted += connection.exec_driver_sql(columns + unpack, parameters).rowcount
    if batches:
        # one statement for all of them, unpacking an array in the database as for client ids. The
        # driver's executemany stepped and reset each row with the GIL released and taken back (~130
        # hand-overs a flush of 64 requests); in the live server, where the event loop holds the GIL,
        # each was a wait and a wake-up: context switches 4.3 -> 2.4 a request, server CPU 726 -> 687
        # us a request at a 100% rate (servers of both alternated, medians of 3: prediction_log.md)
        if sqlite:
            statement = ("SELECT ?, ?, json_extract(value, '$[0]'), ?, json_extract(value, '$[1]'), 0, "
                         "json_extract(value, '$[2]'), NULL FROM json_each(?) WHERE true")
            rows = orjson.dumps([(prefix + BATCH_MARK, first, n) for prefix, first, n in batches]).decode()
            parameters = (calibrator_id, epoch_id, chunk_id, rows)
        else:
            statement = ("SELECT %s, %s, u.id, %s, u.first, false, u.n, NULL FROM unnest(%s::text[], %s::int[], "
                         "%s::int[]) AS u(id, first, n) ORDER BY u.id")
            parameters = (calibrator_id, epoch_id, chunk_id, [prefix + BATCH_MARK for prefix, _, _ in batches],
                          [first for _, first, _ in batches], [n for _, _, n in batches])
        connection.exec_driver_sql(columns + statement + conflict, parameters)
        inserted += len(batches)  # batch keys are random: all new
    return inserted


def prediction_chunks(session: Session, chunk_ids: set[int]) -> dict[int, tuple]:
    """``{chunk_id: (version, kind, n_classes, inputs array)}`` of logged chunks."""
    chunks = {}
    for chunk in session.scalars(select(PredictionChunkRow).where(PredictionChunkRow.id.in_(sorted(chunk_ids)))):
        array = from_raw(chunk.inputs, chunk.dtype, chunk.n_rows, chunk.n_classes, chunk.input_kind)
        chunks[chunk.id] = (chunk.version, chunk.input_kind, chunk.n_classes, array)
    return chunks


def prediction_rows(session: Session, wanted: dict[int, set[int]]) -> dict[int, tuple]:
    """``{chunk_id: (version, kind, n_classes, {row: inputs})}`` of the rows ``wanted`` of logged
    chunks (``{chunk_id: rows}``): each run of consecutive rows is cut from its chunk in the database
    (``app.platform.sql.byte_range``), so that labelling a few rows never reads a whole chunk."""
    out = {}
    for chunk_id in sorted(wanted):
        facts = session.execute(select(PredictionChunkRow.version, PredictionChunkRow.input_kind,
                                       PredictionChunkRow.n_classes, PredictionChunkRow.dtype)
                                .where(PredictionChunkRow.id == chunk_id)).first()
        if facts is None:  # deleted meanwhile (retention)
            continue
        version, kind, k, dtype = facts
        row_bytes = np.dtype(dtype).itemsize * (1 if kind == "scores" else k)
        rows = sorted(wanted[chunk_id])
        found: dict[int, np.ndarray] = {}
        start = 0
        while start < len(rows):
            stop = start + 1
            while stop < len(rows) and rows[stop] == rows[stop - 1] + 1:
                stop += 1
            first, n = rows[start], stop - start
            data = session.execute(select(byte_range(PredictionChunkRow.inputs, first * row_bytes, n * row_bytes))
                                   .where(PredictionChunkRow.id == chunk_id)).scalar_one()
            array = from_raw(data, dtype, n, k, kind)
            found.update((first + i, array[i]) for i in range(n))
            start = stop
        out[chunk_id] = (version, kind, k, found)
    return out


def any_logging(session: Session) -> bool:
    """Whether some calibrator logs its predictions (a sampling rate above 0)."""
    return registry.any_logging(session)


def logged_counts(session: Session, calibrator_id: int) -> tuple[int, int]:
    """Logged predictions of a calibrator, and how many of them have their label."""
    total, labelled = session.execute(
        select(func.coalesce(func.sum(LoggedPredictionRow.n_rows), 0),
               func.coalesce(func.sum(cast(LoggedPredictionRow.labelled, Integer)), 0))
        .where(LoggedPredictionRow.calibrator_id == calibrator_id)).one()
    return int(total), int(labelled)


def room(session: Session, calibrator_id: int, cap: int) -> int:
    """Rows the calibrator's log may still take under ``cap``, as last committed (no lock: a
    writer's first look, ``reserve_rows`` decides); raises ``NoResultFound`` for a calibrator deleted
    meanwhile (the writer counts its rows as failed, not as dropped by the cap)."""
    return max(cap - registry.logged_rows(session, calibrator_id), 0)


def reserve_rows(session: Session, calibrator_id: int, n: int, cap: int) -> bool:
    """Count ``n`` more logged rows for the calibrator if they keep it within ``cap``; whether they
    did. One conditional update: writers of several processes cannot pass the cap together. Called
    after the chunk's index rows are inserted, so that a writer takes the calibrator's row lock
    after the index rows, as a labels call does (``claim_labels`` then ``lock_calibrator``)."""
    return registry_writes.add_logged_rows(session, calibrator_id, n, cap)


def count_dropped(session: Session, calibrator_id: int, n: int) -> None:
    """Count ``n`` rows the calibrator's full log did not take."""
    registry_writes.add_dropped_rows(session, calibrator_id, n)


def log_state(session: Session, calibrator_id: int) -> tuple[int, int]:
    """The calibrator's logged rows and the rows its full log dropped."""
    return registry.log_counts(session, calibrator_id)


def every_dropped(session: Session) -> list[tuple[str, int]]:
    """(name, dropped rows) of every calibrator whose log dropped rows, for /metrics."""
    return registry.every_dropped(session)


def delete_predictions_before(session: Session, before: datetime) -> int:
    """Delete prediction-log chunks (and their ids) created before ``before``, and the epochs
    left empty, and take their rows off their calibrators' counts (room a full log logs into
    again); returns the chunks removed."""
    old = select(PredictionChunkRow.id).where(PredictionChunkRow.created_at < before).scalar_subquery()
    session.execute(delete(LoggedPredictionRow).where(LoggedPredictionRow.chunk_id.in_(old)))
    # the rows this transaction deleted (RETURNING), not a sum read before: a concurrent retention
    # run (another replica) that deleted them first leaves nothing to take off the counts here
    deleted = session.execute(delete(PredictionChunkRow).where(PredictionChunkRow.created_at < before)
                              .returning(PredictionChunkRow.calibrator_id, PredictionChunkRow.n_rows)).all()
    removed = len(deleted)
    freed: dict[int, int] = {}
    for calibrator_id, rows in deleted:
        freed[calibrator_id] = freed.get(calibrator_id, 0) + rows
    for calibrator_id, rows in sorted(freed.items()):  # after the index rows, as writers lock them (``reserve_rows``)
        registry_writes.add_logged_rows(session, calibrator_id, -rows)
    prediction_epoch_store.delete_empty(session)
    return removed
