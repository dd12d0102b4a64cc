"""Persistence of the prediction log's epochs (``PredictionEpochRow``, migration 0011): opened and
written by a writer, closed with a Bloom filter of their ids (``app.prediction_log.bloom``), listed for lookups,
closed when their writer is gone and deleted once empty. Every function takes a session from
``Database.write()`` (``listed`` and ``filters`` from ``read()`` too).
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

import numpy as np
from sqlalchemy import Table, delete, exists, insert, select, text, update
from sqlalchemy.orm import Session

from ..platform.db import rows_matched
from ..platform.rows import utcnow
from ..platform.sql import IN_LIST
from . import bloom
from .rows import LoggedPredictionRow, PredictionEpochRow

EPOCHS = cast(Table, PredictionEpochRow.__table__)  # a declarative class's table, typed as any FROM clause
EPOCH_ROWS = "FROM logged_predictions WHERE calibrator_id = :c AND epoch_id = :e"  # an epoch's index rows


def open_epoch(session: Session, calibrator_id: int) -> int:
    """A new open epoch of ``calibrator_id``'s log, written now; returns its id."""
    now = utcnow()
    return session.connection().execute(insert(EPOCHS).returning(EPOCHS.c.id), {
        "calibrator_id": calibrator_id, "n_ids": 0, "created_at": now, "written_at": now}).scalar_one()


def mark_written(session: Session, epoch_id: int, calibrator_id: int) -> bool:
    """Whether ``epoch_id`` is still an open epoch of ``calibrator_id``, marking it written now: the
    update takes the epoch's row lock for the rest of the transaction, so a ``close`` either waits
    for the ids this transaction writes (and puts them in its filter) or came first (and this
    answers ``False``)."""
    return session.connection().execute(
        update(EPOCHS).where(EPOCHS.c.id == epoch_id, EPOCHS.c.calibrator_id == calibrator_id,
                             EPOCHS.c.bloom_hashes.is_(None))
        .values(written_at=utcnow())).rowcount == 1


def close(session: Session, epoch_id: int, hashes: int = bloom.HASHES,
          digests: tuple[np.ndarray, np.ndarray] | None = None) -> bool:
    """Close ``epoch_id``: store the Bloom filter of every id its index holds; ``False`` where it
    was closed or deleted already. No id is written into it afterwards (``mark_written``).
    ``digests``: the ``bloom.digests`` of every id its writer wrote into it, which the writer kept
    (``app.prediction_log.epochs.EpochWriter``). With the labelled generated ids' rows (``n_rows`` 0:
    a label's, ``app.prediction_log.lookup.claim_labels``), read here, they make the filter where
    they are as many distinct ids as the index holds (so exactly its ids: the same bytes as the
    filter of the ids read back); else (retention deleted some meanwhile) the ids are read back.
    Counting and reading those few rows cost less than reading 65536 ids back."""
    calibrator_id = session.execute(
        select(EPOCHS.c.calibrator_id).where(EPOCHS.c.id == epoch_id, EPOCHS.c.bloom_hashes.is_(None))
        .with_for_update()).scalar_one_or_none()
    if calibrator_id is None:
        return False
    where = {"c": calibrator_id, "e": epoch_id}
    connection = session.connection()
    data = None
    if digests is not None:
        n_ids = connection.execute(text(f"SELECT count(*) {EPOCH_ROWS}"), where).scalar_one()
        labelled = [key for (key,) in connection.execute(text(f"SELECT prediction_id {EPOCH_ROWS} AND n_rows = 0"),
                                                         where)]
        h1, h2 = digests
        if labelled:
            more = bloom.digests(labelled)
            h1, h2 = np.concatenate([h1, more[0]]), np.concatenate([h2, more[1]])
        if len(np.unique(h1)) == n_ids:
            data = bloom.from_digests(h1, h2, n_ids, hashes=hashes)
    if data is None:
        # the driver's rows, not ORM scalars (a third of the time: docs/benchmarks.md, "Design figures")
        keys = [key for (key,) in connection.execute(text(f"SELECT prediction_id {EPOCH_ROWS}"), where)]
        n_ids, data = len(keys), bloom.build(keys, hashes=hashes)
    session.execute(update(EPOCHS).where(EPOCHS.c.id == epoch_id).values(
        bloom=data, bloom_hashes=hashes, n_ids=n_ids, closed_at=utcnow()))
    return True


def stale(session: Session, written_before: datetime) -> list[int]:
    """The open epochs last written before ``written_before``: their writer stopped without closing
    them, or has been idle since, or they hold ids logged before migration 0011."""
    return list(session.scalars(select(EPOCHS.c.id).where(EPOCHS.c.bloom_hashes.is_(None),
                                                          EPOCHS.c.written_at < written_before)))


def delete_empty(session: Session) -> int:
    """Delete the closed epochs whose ids retention has all deleted; returns how many."""
    held = exists().where(LoggedPredictionRow.calibrator_id == EPOCHS.c.calibrator_id,
                          LoggedPredictionRow.epoch_id == EPOCHS.c.id)
    return rows_matched(session.execute(delete(EPOCHS).where(EPOCHS.c.bloom_hashes.is_not(None), ~held)))


def listed(session: Session, calibrator_id: int) -> list[tuple[int, int | None]]:
    """``(epoch id, bloom_hashes)`` of ``calibrator_id``'s epochs, oldest first (``None``: open)."""
    return [tuple(row) for row in session.execute(
        select(EPOCHS.c.id, EPOCHS.c.bloom_hashes).where(EPOCHS.c.calibrator_id == calibrator_id)
        .order_by(EPOCHS.c.id))]


def filters(session: Session, epoch_ids: list[int]) -> dict[int, tuple[bytes, int]]:
    """``{epoch id: (bloom filter, hash functions)}`` of closed epochs."""
    found = {}
    for start in range(0, len(epoch_ids), IN_LIST):
        found.update({epoch_id: (data, hashes) for epoch_id, data, hashes in session.execute(
            select(EPOCHS.c.id, EPOCHS.c.bloom, EPOCHS.c.bloom_hashes)
            .where(EPOCHS.c.id.in_(epoch_ids[start:start + IN_LIST]), EPOCHS.c.bloom_hashes.is_not(None)))})
    return found
