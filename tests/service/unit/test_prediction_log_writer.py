"""The prediction log's writer: a flush of many requests writes every batch of generated ids as
one index row in one statement (``log_predictions``), each at its first row of the chunk, on SQLite
and Postgres; a write waits for ``flush_rows`` rows or ``flush_bytes`` bytes (by default a few
hundred requests of 64 x 100 float32, not 64); and the writer's thread carries its name for the OS, by which
``benchmarks/prediction_log.py`` tells its CPU time from the hot path's pool threads."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import insert, select

from app.platform.db import Database
from app.prediction_log.buffer import LogBuffer, Pending
from app.prediction_log.lookup import find_logged
from app.prediction_log.rows import PredictionChunkRow
from app.prediction_log.service import PredictionLog, name_thread, new_prefix
from app.prediction_log.store import logged_counts, prediction_chunks
from app.registry.rows import CalibratorRow
from app.registry.store import ResolvedVersion


def new_calibrator(db: Database, name: str) -> int:
    """The id of a new calibrator row named ``name`` (no version: the log's rows only refer to it)."""
    with db.write() as session:
        return session.execute(insert(CalibratorRow).returning(CalibratorRow.id), {"name": name}).scalar_one()


def test_a_flush_of_many_requests_writes_each_batch_at_its_rows(database_url):
    db = Database(database_url)
    try:
        calibrator = new_calibrator(db, "many")
        log = PredictionLog(db, flush_rows=1 << 40)
        resolved = ResolvedVersion("many", 1, "-", 1, calibrator, 1.0)
        rng = np.random.default_rng(0)
        batches = [rng.standard_normal((int(n), 3)).astype(np.float32) for n in rng.integers(1, 9, 300)]
        served = [log.record(resolved, "logits", 3, batch, None) for batch in batches]
        client_ids = [f"client-{i}" for i in range(len(batches[0]))]
        served.append(log.record(resolved, "logits", 3, batches[0], client_ids))
        assert log.flush() == sum(len(b) for b in batches) + len(batches[0])

        with db.read() as session:
            assert logged_counts(session, calibrator) == (sum(len(b) for b in batches) + len(batches[0]), 0)
            # one id of every batch (its last row), and the client ids
            ids = [s.ids[-1] for s in served]
            found = find_logged(session, calibrator, ids)
            assert set(found) == set(ids)
            chunks = prediction_chunks(session, {logged.chunk_id for logged in found.values()})
        (chunk,) = chunks
        inputs = chunks[chunk][3]
        for batch, pid in zip([*batches, batches[0]], ids, strict=True):
            assert not found[pid].labelled
            np.testing.assert_array_equal(inputs[found[pid].row], batch[-1])
    finally:
        db.dispose()


def _chunk_rows_when_due(db: Database, buffer: LogBuffer, calibrator: int, before: int, batch: np.ndarray) -> list[int]:
    """Keep ``before`` copies of ``batch`` in ``buffer`` while its writer waits for a write that is
    due (``run_once`` on a thread, with no ``flush_seconds`` to end its wait), check it still
    waits, keep one more, check that it wrote; returns the rows of each chunk stored."""
    writer = threading.Thread(target=buffer.run_once)
    writer.start()
    try:
        for _ in range(before):
            assert buffer.keep(Pending(calibrator, 1, "logits", batch.shape[1], batch.copy(), None, new_prefix()))
        writer.join(0.3)
        assert writer.is_alive(), f"a write after {before} batches of {batch.shape}"
    finally:
        buffer.keep(Pending(calibrator, 1, "logits", batch.shape[1], batch.copy(), None, new_prefix()))
        writer.join(30)
    assert not writer.is_alive()
    with db.read() as session:
        return list(session.scalars(select(PredictionChunkRow.n_rows).order_by(PredictionChunkRow.id)))


def test_a_write_waits_for_flush_rows_or_flush_bytes_which_by_default_hold_hundreds_of_requests(database_url):
    db = Database(database_url)
    try:
        calibrator = new_calibrator(db, "due")
        batch = np.random.default_rng(0).standard_normal((64, 100)).astype(np.float32)  # 25600 bytes
        # the defaults: 8 MiB of these is 327.68 batches (20992 rows, under flush_rows 65536), where
        # a write came every 4096 rows (64 batches) before
        assert _chunk_rows_when_due(db, LogBuffer(db, flush_seconds=3600), calibrator, 327, batch) == [328 * 64]
        # rows: 100 rows are due at the second batch of 64, bytes far away
        assert _chunk_rows_when_due(db, LogBuffer(db, flush_rows=100, flush_seconds=3600, flush_bytes=1 << 40),
                                    calibrator, 1, batch) == [328 * 64, 128]
        # bytes: 3 x 25600 >= 60000, rows far away
        assert _chunk_rows_when_due(db, LogBuffer(db, flush_rows=1 << 40, flush_seconds=3600, flush_bytes=60000),
                                    calibrator, 2, batch) == [328 * 64, 128, 192]
    finally:
        db.dispose()


@pytest.mark.skipif(sys.platform != "linux", reason="thread names for the OS are set on Linux only")
def test_the_writer_thread_is_named_for_the_os():
    names = []

    def named():
        name_thread("prediction-log")
        names.append(Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip())

    thread = threading.Thread(target=named)
    thread.start()
    thread.join()
    assert names == ["prediction-log"]
