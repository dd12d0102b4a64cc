"""Persistence of the prediction log: logged inputs in binary chunks with their prediction ids
(an index row per client id, one per batch of generated ids), on SQLite and Postgres alike.

A chunk holds its rows as one raw little-endian array (``app.observation_store.raw``), never a
pickle. Every function takes a session from ``Database.read()`` or ``write()``.
"""

from __future__ import annotations

import re
from datetime import datetime

import numpy as np
import orjson
from sqlalchemy import Integer, cast, delete, func, insert, select, update
from sqlalchemy.orm import Session

from .models import CalibratorRow, LoggedPredictionRow, PredictionChunkRow, utcnow
from .observation_store import IN_LIST, from_raw, raw_view
from .store import dialect_insert

BATCH_MARK = ","  # no client id holds one: ``<prefix>,`` is the row of a batch of generated ids
GENERATED = re.compile(r"([0-9a-f]{16}-)(0|[1-9][0-9]{0,8})")  # app.prediction_log.new_prefix
# a batch of generated ids that an earlier release sampled row by row (migration 0010): the sorted
# numbers of the ids it kept, the j-th at row first + j; still read, no longer written
KEPT_DTYPE = np.dtype("<u4")
IDS_PER_STATEMENT = 50_000  # client ids unpacked by one statement (a bounded parameter)


def log_predictions(session: Session, calibrator_id: int, version: int, kind: str, n_classes: int,
                    inputs: np.ndarray, ids: list[str | None],
                    batches: list[tuple[str, int, int]] = ()) -> int:
    """Store one chunk of logged inputs with their ids: ``ids``, the client ids of rows 0, 1, ...,
    one index row each (an id already logged for this calibrator keeps its first prediction; a row
    whose id is ``None`` gets none),
    and ``batches`` of generated ids as ``(prefix, first row, n)``, one index row per batch
    (migration 0009): ids ``prefix0`` to ``prefix{n-1}`` at rows ``first`` to ``first + n - 1``.
    At 64 rows a request that is 64 times fewer B-tree inserts. Returns how many ids were new."""
    # the array's own bytes as the blob, not a copy (``raw``'s ``tobytes``): the driver copies them
    # once more when it binds them, and a flush at 100% is ~1.6 MB, copied ~8 times on its way
    data, dtype = raw_view(inputs)
    # a Core insert on the table: the ORM's bulk-insert path cost ~1.7 ms a flush, for one row
    chunks = PredictionChunkRow.__table__
    connection = session.connection()
    chunk_id = connection.execute(insert(chunks).returning(chunks.c.id), {
        "calibrator_id": calibrator_id, "version": version, "input_kind": kind, "n_rows": len(inputs),
        "n_classes": n_classes, "dtype": dtype, "inputs": data, "created_at": utcnow()}).scalar_one()
    columns = "INSERT INTO logged_predictions (calibrator_id, prediction_id, chunk_id, row, labelled, n_rows, kept) "
    conflict = " ON CONFLICT (calibrator_id, prediction_id) DO NOTHING"
    inserted = 0
    # the client ids in statements that unpack an array in the database (IDS_PER_STATEMENT at a
    # time): per id, half the CPU of the driver's executemany, which converts each row's
    # parameters in Python. On Postgres in id order, so that two processes logging the same ids
    # lock them in the same order (no deadlock); a duplicate's first row still wins.
    sqlite = session.bind.dialect.name == "sqlite"
    if sqlite:
        unpack = "SELECT ?, value, ?, key + ?, 0, 1, NULL FROM json_each(?) WHERE value IS NOT NULL"
    else:
        unpack = ("SELECT %s, u.id, %s, u.ord - 1 + %s, false, 1, NULL FROM unnest(%s::text[]) WITH ORDINALITY "
                  "AS u(id, ord) WHERE u.id IS NOT NULL ORDER BY u.id, u.ord")
    for start in range(0, len(ids), IDS_PER_STATEMENT):
        part = ids[start:start + IDS_PER_STATEMENT]
        array = orjson.dumps(part).decode() if sqlite else part
        parameters = (calibrator_id, chunk_id, start, array)
        inserted += connection.exec_driver_sql(columns + unpack + conflict, parameters).rowcount
    if batches:
        # one statement for all of them, unpacking an array in the database as for client ids. The
        # driver's executemany stepped and reset each row with the GIL released and taken back (~130
        # hand-overs a flush of 64 requests); in the live server, where the event loop holds the GIL,
        # each was a wait and a wake-up: context switches 4.3 -> 2.4 a request, server CPU 726 -> 687
        # us a request at a 100% rate (servers of both alternated, medians of 3: prediction_log.md)
        if sqlite:
            statement = ("SELECT ?, json_extract(value, '$[0]'), ?, json_extract(value, '$[1]'), 0, "
                         "json_extract(value, '$[2]'), NULL FROM json_each(?) WHERE true")
            rows = orjson.dumps([(prefix + BATCH_MARK, first, n) for prefix, first, n in batches]).decode()
            parameters = (calibrator_id, chunk_id, rows)
        else:
            statement = ("SELECT %s, u.id, %s, u.first, false, u.n, NULL FROM unnest(%s::text[], %s::int[], "
                         "%s::int[]) AS u(id, first, n) ORDER BY u.id")
            parameters = (calibrator_id, chunk_id, [prefix + BATCH_MARK for prefix, _, _ in batches],
                          [first for _, first, _ in batches], [n for _, _, n in batches])
        connection.exec_driver_sql(columns + statement + conflict, parameters)
        inserted += sum(n for _, _, n in batches)  # batch keys are random: all new
    return inserted


def _generated(session: Session, calibrator_id: int, ids) -> dict[str, tuple[int, int]]:
    """``{id: (chunk_id, row)}`` of the generated ``ids`` that a logged batch holds."""
    wanted: dict[str, list[tuple[str, int]]] = {}
    for pid in ids:
        match = GENERATED.fullmatch(pid)
        if match:
            wanted.setdefault(match.group(1) + BATCH_MARK, []).append((pid, int(match.group(2))))
    found: dict[str, tuple[int, int]] = {}
    keys = list(wanted)
    for start in range(0, len(keys), IN_LIST):
        rows = session.execute(
            select(LoggedPredictionRow.prediction_id, LoggedPredictionRow.chunk_id, LoggedPredictionRow.row,
                   LoggedPredictionRow.n_rows, LoggedPredictionRow.kept)
            .where(LoggedPredictionRow.calibrator_id == calibrator_id,
                   LoggedPredictionRow.prediction_id.in_(keys[start:start + IN_LIST])))
        for key, chunk, first, n, kept in rows:
            if kept is None:
                found.update({pid: (chunk, first + i) for pid, i in wanted[key] if i < n})
                continue
            numbers = np.frombuffer(kept, dtype=KEPT_DTYPE)
            for pid, i in wanted[key]:
                j = int(np.searchsorted(numbers, i))
                if j < len(numbers) and numbers[j] == i:
                    found[pid] = (chunk, first + j)
    return found


def find_logged(session: Session, calibrator_id: int, ids: list[str]) -> dict[str, tuple[int, int, bool]]:
    """``{prediction_id: (chunk_id, row, labelled)}`` of the ``ids`` that were logged: an id's own
    row, else (a generated id not labelled yet) its batch's."""
    found: dict[str, tuple[int, int, bool]] = {}
    own = [pid for pid in ids if BATCH_MARK not in pid]
    for start in range(0, len(own), IN_LIST):
        part = own[start:start + IN_LIST]
        rows = session.execute(
            select(LoggedPredictionRow.prediction_id, LoggedPredictionRow.chunk_id, LoggedPredictionRow.row,
                   LoggedPredictionRow.labelled)
            .where(LoggedPredictionRow.calibrator_id == calibrator_id,
                   LoggedPredictionRow.prediction_id.in_(part)))
        found.update({pid: (chunk, row, labelled) for pid, chunk, row, labelled in rows})
    batched = _generated(session, calibrator_id, [pid for pid in own if pid not in found])
    found.update({pid: (chunk, row, False) for pid, (chunk, row) in batched.items()})
    return found


def claim_labels(session: Session, calibrator_id: int, ids: list[str]) -> set[str]:
    """Mark ``ids`` labelled where they were not yet; returns those this call marked (a
    concurrent call for the same id marks it once: the update takes the row's lock, and a
    generated id's labelled row, ``n_rows`` 0, is inserted once under the primary key)."""
    claimed: set[str] = set()
    for start in range(0, len(ids), IN_LIST):
        part = ids[start:start + IN_LIST]
        rows = session.execute(
            update(LoggedPredictionRow)
            .where(LoggedPredictionRow.calibrator_id == calibrator_id,
                   LoggedPredictionRow.prediction_id.in_(part), LoggedPredictionRow.labelled.is_(False))
            .values(labelled=True).returning(LoggedPredictionRow.prediction_id))
        claimed.update(pid for (pid,) in rows)
    batched = list(_generated(session, calibrator_id, [pid for pid in ids if pid not in claimed]).items())
    for start in range(0, len(batched), IN_LIST):
        values = [{"calibrator_id": calibrator_id, "prediction_id": pid, "chunk_id": chunk, "row": row,
                   "labelled": True, "n_rows": 0} for pid, (chunk, row) in batched[start:start + IN_LIST]]
        statement = dialect_insert(session)(LoggedPredictionRow).values(values)
        statement = statement.on_conflict_do_nothing(index_elements=["calibrator_id", "prediction_id"])
        claimed.update(pid for (pid,) in session.execute(statement.returning(LoggedPredictionRow.prediction_id)))
    return claimed


def prediction_chunks(session: Session, chunk_ids: set[int]) -> dict[int, tuple]:
    """``{chunk_id: (version, kind, n_classes, inputs array)}`` of logged chunks."""
    chunks = {}
    for chunk in session.scalars(select(PredictionChunkRow).where(PredictionChunkRow.id.in_(sorted(chunk_ids)))):
        array = from_raw(chunk.inputs, chunk.dtype, chunk.n_rows, chunk.n_classes, chunk.input_kind)
        chunks[chunk.id] = (chunk.version, chunk.input_kind, chunk.n_classes, array)
    return chunks


def any_logging(session: Session) -> bool:
    """Whether some calibrator logs its predictions (a sampling rate above 0)."""
    return session.scalar(select(CalibratorRow.id).where(CalibratorRow.log_sample_rate > 0).limit(1)) is not None


def logged_counts(session: Session, calibrator_id: int) -> tuple[int, int]:
    """Logged predictions of a calibrator, and how many of them have their label."""
    total, labelled = session.execute(
        select(func.coalesce(func.sum(LoggedPredictionRow.n_rows), 0),
               func.coalesce(func.sum(cast(LoggedPredictionRow.labelled, Integer)), 0))
        .where(LoggedPredictionRow.calibrator_id == calibrator_id)).one()
    return int(total), int(labelled)


def delete_predictions_before(session: Session, before: datetime) -> int:
    """Delete prediction-log chunks (and their ids) created before ``before``; returns the chunks removed."""
    old = select(PredictionChunkRow.id).where(PredictionChunkRow.created_at < before).scalar_subquery()
    session.execute(delete(LoggedPredictionRow).where(LoggedPredictionRow.chunk_id.in_(old)))
    return session.execute(delete(PredictionChunkRow).where(PredictionChunkRow.created_at < before)).rowcount
