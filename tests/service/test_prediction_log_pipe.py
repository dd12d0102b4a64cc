"""The prediction log's writer process (``app.prediction_log_pipe``): batches sent down the pipe are
written as sent (client ids, generated ids, 1-D scores, float16/32/64, big-endian and strided
inputs, a batch larger than the pipe); ``flush`` returns once they are stored; a stopped writer's
full pipe drops batches and counts them, and a killed one is replaced; a closed pipe, or an API
process that died without closing it, has the writer store what it held and exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import insert

from app.db import Database
from app.models import CalibratorRow
from app.prediction_log import PredictionLog
from app.prediction_log_pipe import PIPE_BYTES, PipeWriter
from app.prediction_log_store import find_logged, logged_counts, prediction_chunks
from app.store import ResolvedVersion

REPO = Path(__file__).resolve().parents[2]


def _config(url: str, **overrides) -> dict:
    return {"database_url": url, "db_timeout": 30.0, "flush_rows": 4096, "flush_seconds": 60.0,
            "max_buffer_bytes": 256 << 20, "log_level": "warning", **overrides}


@pytest.fixture
def calibrator(database_url):
    db = Database(database_url)
    with db.write() as session:
        calibrator_id = session.execute(insert(CalibratorRow).returning(CalibratorRow.id),
                                        {"name": "piped"}).scalar_one()
    yield db, calibrator_id
    db.dispose()


def _stored(db: Database, calibrator_id: int, ids: list[str]) -> dict[str, np.ndarray]:
    """The stored input row of each of ``ids`` that was logged."""
    with db.read() as session:
        found = find_logged(session, calibrator_id, ids)
        chunks = prediction_chunks(session, {chunk for chunk, _, _ in found.values()})
    return {pid: chunks[chunk][3][row] for pid, (chunk, row, _) in found.items()}


def test_batches_of_every_kind_arrive_as_sent_and_a_flush_waits_for_them(calibrator, database_url):
    db, calibrator_id = calibrator
    log = PredictionLog(db, pipe=PipeWriter(_config(database_url)))
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((40, 5))
    sent = [  # (kind, n_classes, inputs, client ids)
        ("logits", 5, logits.astype(np.float32), None),
        ("logits", 5, logits.astype(">f8"), [f"big-{i}" for i in range(40)]),  # big-endian
        ("logits", 5, logits[::2, ::-1], None),  # strided
        ("logits", 5, logits.astype(np.float16), [f"half-{i}" for i in range(40)]),
        ("scores", 2, rng.random(17), [f"score-{i}" for i in range(17)]),
        ("logits", 5, rng.integers(-3, 3, (6, 5)), None),  # integers: stored as float64
        # larger than the pipe: written in parts, arrives whole
        ("logits", 1000, rng.standard_normal((2 * PIPE_BYTES // 4000 + 3, 1000)).astype(np.float32), None),
    ]
    try:
        served = [log.record(ResolvedVersion("piped", 1, "-", 1, calibrator_id, 1.0), kind, k, inputs, ids)
                  for kind, k, inputs, ids in sent]
        assert [s.logged for s in served] == [len(inputs) for _, _, inputs, _ in sent]
        log.flush()
        with db.read() as session:
            assert logged_counts(session, calibrator_id) == (sum(len(inputs) for _, _, inputs, _ in sent), 0)
        for (_, _, inputs, _), batch in zip(sent, served, strict=True):
            stored = _stored(db, calibrator_id, batch.ids)
            assert set(stored) == set(batch.ids)
            for i, pid in enumerate(batch.ids):
                expected = inputs[i] if inputs.dtype.kind == "f" else inputs[i].astype(np.float64)
                assert stored[pid].dtype == expected.dtype.newbyteorder("<")
                np.testing.assert_array_equal(stored[pid], expected)
    finally:
        log.stop()


def test_a_full_pipe_drops_and_counts_batches_and_a_killed_writer_is_replaced(calibrator, database_url):
    db, calibrator_id = calibrator
    pipe = PipeWriter(_config(database_url))
    log = PredictionLog(db, pipe=pipe)
    resolved = ResolvedVersion("piped", 1, "-", 1, calibrator_id, 1.0)
    batch = np.ones((64, 100), dtype=np.float32)  # 25.6 kB: the 1 MiB pipe holds ~40
    try:
        first = log.record(resolved, "logits", 100, batch, None)
        log.flush()
        os.kill(pipe.process.pid, signal.SIGSTOP)  # a writer that reads nothing
        try:
            outcomes = [log.record(resolved, "logits", 100, batch, None).logged for _ in range(200)]
        finally:
            os.kill(pipe.process.pid, signal.SIGCONT)
        kept = outcomes.count(64)
        assert 0 < kept < 200 and set(outcomes) == {0, 64}
        assert outcomes == sorted(outcomes, reverse=True)  # kept until the pipe was full, then dropped
        assert pipe.dropped_rows == 64 * (200 - kept)
        log.flush()
        with db.read() as session:
            assert logged_counts(session, calibrator_id)[0] == 64 * (1 + kept)

        killed = pipe.process
        killed.kill()
        killed.wait()
        lost = log.record(resolved, "logits", 100, batch, None)  # the broken pipe: dropped, counted
        assert lost.logged == 0
        again = log.record(resolved, "logits", 100, batch, None)  # a new writer process
        assert again.logged == 64 and pipe.process is not killed
        log.flush()
        assert set(_stored(db, calibrator_id, [first.ids[0], again.ids[0], lost.ids[0]])) == {
            first.ids[0], again.ids[0]}
    finally:
        log.stop()


def _ended(pid: int) -> bool:
    """Whether a process (not this one's child) has exited: gone, or a zombie its new parent has not reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_the_writer_stores_what_it_holds_when_its_api_process_dies(calibrator, database_url):
    """An API process that exits without closing its pipe (killed, crashed): the writer reads end of
    file, writes the batches it still holds (flush_seconds 60: none were written yet) and exits."""
    db, calibrator_id = calibrator
    script = textwrap.dedent(f"""
        import os, sys, numpy as np
        from app.prediction_log import PredictionLog
        from app.prediction_log_pipe import PipeWriter
        from app.store import ResolvedVersion
        pipe = PipeWriter({_config(database_url)!r})
        log = PredictionLog(None, pipe=pipe)
        served = log.record(ResolvedVersion("piped", 1, "-", 1, {calibrator_id}, 1.0), "logits", 3,
                            np.arange(30.0).reshape(10, 3), None)
        print(pipe.process.pid, served.prefix, flush=True)
        os._exit(0)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True,
                         timeout=120).stdout.split()
    writer, prefix = int(out[0]), out[1]
    ids = [f"{prefix}{i}" for i in range(10)]
    deadline = time.monotonic() + 60
    while not _ended(writer) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _ended(writer)
    stored = _stored(db, calibrator_id, ids)
    np.testing.assert_array_equal(np.array([stored[f"{prefix}{i}"] for i in range(10)]),
                                  np.arange(30.0).reshape(10, 3))
