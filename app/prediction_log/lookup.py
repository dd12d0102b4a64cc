"""Lookups in the prediction log's id index for label joins: where each id's served inputs are
(``find_logged``) and marking them labelled once (``claim_labels``).

The index is split in epochs (``app.prediction_log.epochs``): an id is looked for in the open epochs
and in the closed ones whose Bloom filter may hold it. A client id served again has a row in each
epoch that logged it: it joins the row of its first chunk (the flush written first; on Postgres,
the chunk id taken first), and a label marks all its rows. A generated id has no row of
its own until it is labelled: it is found through its batch's row (``<prefix>,``, migration 0009).
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import numpy as np
import orjson
from sqlalchemy import update
from sqlalchemy.orm import Session

from ..platform.sql import IN_LIST, dialect_insert
from .epochs import EpochFilters
from .rows import LoggedPredictionRow
from .store import BATCH_MARK, GENERATED

# a batch of generated ids that an earlier release sampled row by row (migration 0010): the sorted
# numbers of the ids it kept, the j-th at row first + j; still read, no longer written
KEPT_DTYPE = np.dtype("<u4")
INDEX = LoggedPredictionRow
PAIRS_PER_STATEMENT = 20_000  # (epoch, id) pairs one lookup statement unpacks


class Logged(NamedTuple):
    """Where a logged id's inputs are (chunk and row: its first serving's), whether it is labelled,
    that row's epoch, whether it has a row of its own (else it is a generated id found through its
    batch's row), and the epochs of all its own rows (an id served again has one in each epoch
    that logged it)."""

    chunk_id: int
    row: int
    labelled: bool
    epoch_id: int
    own: bool = True
    epochs: tuple[int, ...] = ()


def _rows(session: Session, calibrator_id: int, keys: list[str], filters: EpochFilters, columns: str):
    """The index rows (epoch, key, then ``columns``) of ``keys``, in every epoch that may hold them:
    the (epoch, key) pairs joined to the index in one statement per PAIRS_PER_STATEMENT, unpacked
    in the database, not a statement per epoch (docs/benchmarks.md, "Design figures")."""
    pairs = filters.candidates(session, calibrator_id, keys)
    selected = ", ".join(f"l.{name}" for name in ("epoch_id", "prediction_id", *columns.split(", ")))
    connection = session.connection()
    for start in range(0, len(pairs), PAIRS_PER_STATEMENT):
        part = pairs[start:start + PAIRS_PER_STATEMENT]
        if connection.dialect.name == "sqlite":
            # CROSS JOIN keeps the pairs the outer loop: one primary-key lookup each
            yield from connection.exec_driver_sql(
                f"SELECT {selected} FROM json_each(?) AS j CROSS JOIN logged_predictions AS l "
                "WHERE l.calibrator_id = ? AND l.epoch_id = json_extract(j.value, '$[0]') "
                "AND l.prediction_id = json_extract(j.value, '$[1]')", (orjson.dumps(part).decode(), calibrator_id))
        else:
            # a LATERAL subquery with LIMIT is not pulled up into a join: a primary-key lookup a pair
            # whatever the statistics say (a fresh table's, unanalysed, made it a hash join over all
            # of the calibrator's ids)
            yield from connection.exec_driver_sql(
                f"SELECT {selected} FROM unnest(%s::int[], %s::text[]) AS u(epoch_id, id) CROSS JOIN LATERAL "
                "(SELECT * FROM logged_predictions AS i WHERE i.calibrator_id = %s AND i.epoch_id = u.epoch_id "
                "AND i.prediction_id = u.id LIMIT 1) AS l",
                ([epoch_id for epoch_id, _ in part], [key for _, key in part], calibrator_id))


def _generated(session: Session, calibrator_id: int, ids, filters: EpochFilters) -> dict[str, Logged]:
    """The generated ``ids`` that a logged batch holds, found through the batch's row."""
    wanted: dict[str, list[tuple[str, int]]] = {}
    for pid in ids:
        match = GENERATED.fullmatch(pid)
        if match:
            wanted.setdefault(match.group(1) + BATCH_MARK, []).append((pid, int(match.group(2))))
    found: dict[str, Logged] = {}
    for epoch_id, key, chunk, first, n, kept in _rows(session, calibrator_id, list(wanted), filters,
                                                       "chunk_id, row, n_rows, kept"):
        numbers = None if kept is None else np.frombuffer(kept, dtype=KEPT_DTYPE)
        for pid, i in wanted[key]:
            if numbers is None:
                row = first + i if i < n else None
            else:
                j = int(np.searchsorted(numbers, i))
                row = first + j if j < len(numbers) and numbers[j] == i else None
            if row is not None:
                found.setdefault(pid, Logged(chunk, row, False, epoch_id, own=False))
    return found


def find_logged(session: Session, calibrator_id: int, ids: list[str],
                filters: EpochFilters | None = None) -> dict[str, Logged]:
    """Where each of the ``ids`` that were logged is: its own row of its first chunk (labelled
    when any of its rows is), else (a generated id not labelled yet) its batch's. ``filters``
    keeps the closed epochs' filters between calls (``None``: read for this call only)."""
    filters = filters if filters is not None else EpochFilters(0)
    rows_of: dict[str, list[tuple[int, int, bool, int]]] = {}
    own = [pid for pid in ids if BATCH_MARK not in pid]
    for epoch_id, pid, chunk, row, labelled in _rows(session, calibrator_id, own, filters, "chunk_id, row, labelled"):
        rows_of.setdefault(pid, []).append((chunk, row, bool(labelled), epoch_id))
    found: dict[str, Logged] = {}
    for pid, rows in rows_of.items():
        # served again (perhaps through another writer, whose epoch may be older): the chunk
        # written first is the first serving
        chunk, row, _, epoch_id = min(rows)
        found[pid] = Logged(chunk, row, any(r[2] for r in rows), epoch_id, True, tuple(sorted({r[3] for r in rows})))
    found.update(_generated(session, calibrator_id, [pid for pid in own if pid not in found], filters))
    return found


def claim_labels(session: Session, calibrator_id: int, found: dict[str, Logged]) -> set[str]:
    """Mark the ids of ``found`` (``find_logged``'s) labelled where they were not yet; returns those
    this call marked. An id with rows in several epochs is marked in all of them and claimed only
    where none was labelled: a concurrent call, or one that saw a row another writer had not yet
    committed (on Postgres a chunk's id is taken at insert, not at commit), updates a row already
    labelled and claims nothing (the update takes each row's lock, in epoch order). A generated
    id's labelled row, ``n_rows`` 0, is inserted once under the primary key, in its batch's epoch."""
    by_epoch: dict[int, list[str]] = {}
    for pid, logged in found.items():
        for epoch_id in logged.epochs if logged.own else ():
            by_epoch.setdefault(epoch_id, []).append(pid)
    marked: Counter[str] = Counter()
    for epoch_id, pids in sorted(by_epoch.items()):
        for start in range(0, len(pids), IN_LIST):
            rows = session.execute(
                update(INDEX)
                .where(INDEX.calibrator_id == calibrator_id, INDEX.epoch_id == epoch_id,
                       INDEX.prediction_id.in_(pids[start:start + IN_LIST]), INDEX.labelled.is_(False))
                .values(labelled=True).returning(INDEX.prediction_id))
            marked.update(pid for (pid,) in rows)
    claimed = {pid for pid, n in marked.items() if n == len(found[pid].epochs)}
    batched = [(pid, logged) for pid, logged in found.items() if not logged.own]
    for start in range(0, len(batched), IN_LIST):
        values = [{"calibrator_id": calibrator_id, "epoch_id": logged.epoch_id, "prediction_id": pid,
                   "chunk_id": logged.chunk_id, "row": logged.row, "labelled": True, "n_rows": 0}
                  for pid, logged in batched[start:start + IN_LIST]]
        statement = dialect_insert(session)(INDEX).values(values)
        statement = statement.on_conflict_do_nothing(index_elements=["calibrator_id", "epoch_id", "prediction_id"])
        claimed.update(pid for (pid,) in session.execute(statement.returning(INDEX.prediction_id)))
    return claimed
