"""The prediction log's writer process (``app.prediction_log_pipe`` / ``_process`` / ``_ring``):
batches put into the ring are stored as served (client ids, generated ids, 1-D scores,
float16/32/64, big-endian and strided inputs); ``flush`` returns once they are; a stopped writer's
full ring drops batches whole and says so (``Served.logged`` 0, counted), as does a database that
holds the writer back, and a killed writer is replaced; a record that is not one ends the writer
(status 1); a closed pipe, or an API process that died without closing it, has the writer store
what it held and exit; signals to the API's process group do not reach it; the writer starts
when logging is turned on and with the service when a calibrator logs."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import insert, select, text
from starlette.testclient import TestClient

from app.main import create_app
from app.platform.db import Database
from app.prediction_log import bloom
from app.prediction_log import pipe as prediction_log_pipe
from app.prediction_log.lookup import find_logged
from app.prediction_log.pipe import PipeWriter
from app.prediction_log.ring import KINDS
from app.prediction_log.rows import PredictionEpochRow
from app.prediction_log.service import PredictionLog
from app.prediction_log.store import logged_counts, prediction_chunks
from app.registry.rows import CalibratorRow
from app.registry.store import ResolvedVersion
from app.settings import Settings
from app.wiring import log_writer_process
from calibration import INPUT_KINDS
from tests.service.support.fits import fit

REPO = Path(__file__).resolve().parents[2]


def _config(url: str, **overrides) -> dict:
    return {"database_url": url, "db_timeout": 30.0, "flush_rows": 4096, "flush_bytes": 8 << 20, "flush_seconds": 60.0,
            "max_buffer_bytes": 256 << 20, "log_level": "warning", "cache_bytes": 64 << 20, "epoch_ids": 65536,
            "epoch_digest_bytes": 16 << 20, "max_logged_rows": 10_000_000,
            **overrides}


@pytest.fixture
def calibrator(database_url):
    db = Database(database_url)
    with db.write() as session:
        calibrator_id = session.execute(insert(CalibratorRow).returning(CalibratorRow.id),
                                        {"name": "piped"}).scalar_one()
    yield db, calibrator_id
    db.dispose()


def _logged(db: Database, calibrator_id: int) -> int:
    with db.read() as session:
        return logged_counts(session, calibrator_id)[0]


def _stored(db: Database, calibrator_id: int, ids: list[str]) -> dict[str, np.ndarray]:
    """The stored input row of each of ``ids`` that was logged."""
    with db.read() as session:
        found = find_logged(session, calibrator_id, ids)
        chunks = prediction_chunks(session, {logged.chunk_id for logged in found.values()})
    return {pid: chunks[logged.chunk_id][3][logged.row] for pid, logged in found.items()}


def test_batches_of_every_kind_arrive_as_sent_and_a_flush_waits_for_them(calibrator, database_url):
    db, calibrator_id = calibrator
    log = PredictionLog(db, pipe=PipeWriter(_config(database_url), ring_bytes=16 << 20))
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((40, 5))
    sent = [  # (kind, n_classes, inputs, client ids)
        ("logits", 5, logits.astype(np.float32), None),
        ("logits", 5, logits.astype(">f8"), [f"big-{i}" for i in range(40)]),  # big-endian
        ("logits", 5, logits[::2, ::-1], None),  # strided
        ("logits", 5, logits.astype(np.float16), [f"half-{i}" for i in range(40)]),
        ("scores", 2, rng.random(17), [f"score-{i}" for i in range(17)]),
        ("logits", 5, rng.integers(-3, 3, (6, 5)), None),  # integers: stored as float64
        ("logits", 1000, rng.standard_normal((1000, 1000)).astype(np.float32), None),  # 4 MB, near a quarter
    ]
    try:
        served = [log.record(ResolvedVersion("piped", 1, "-", 1, calibrator_id, 1.0), kind, k, inputs, ids)
                  for kind, k, inputs, ids in sent]
        assert [s.logged for s in served] == [len(inputs) for _, _, inputs, _ in sent]
        too_large = log.record(ResolvedVersion("piped", 1, "-", 1, calibrator_id, 1.0), "logits", 1000,
                               np.zeros((1100, 1000), dtype=np.float32), None)  # over a quarter of the ring
        assert too_large.logged == 0 and log.pipe.dropped_rows == 1100
        assert log.pipe.flush()
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


def test_a_full_ring_drops_batches_whole_and_says_so_and_a_killed_writer_is_replaced(calibrator, database_url):
    db, calibrator_id = calibrator
    pipe = PipeWriter(_config(database_url), ring_bytes=1 << 20, restart_seconds=0.0)
    log = PredictionLog(db, pipe=pipe)
    resolved = ResolvedVersion("piped", 1, "-", 1, calibrator_id, 1.0)
    batch = np.ones((64, 100), dtype=np.float32)  # 25.6 kB: the 1 MiB ring holds ~40
    try:
        first = log.record(resolved, "logits", 100, batch, None)
        assert log.pipe.flush()
        os.kill(pipe.process.pid, signal.SIGSTOP)  # a writer that reads nothing
        try:
            outcomes = [log.record(resolved, "logits", 100, batch, None).logged for _ in range(200)]
        finally:
            os.kill(pipe.process.pid, signal.SIGCONT)
        kept = outcomes.count(64)
        assert 0 < kept < 200 and set(outcomes) == {0, 64}
        assert outcomes == sorted(outcomes, reverse=True)  # kept until the ring was full, then dropped
        assert pipe.dropped_rows == 64 * (200 - kept)
        assert log.pipe.flush()
        assert _logged(db, calibrator_id) == 64 * (1 + kept)

        killed = pipe.process
        killed.kill()
        killed.wait()
        time.sleep(0.01)  # the next put announces the head: the broken pipe is seen
        lost = log.record(resolved, "logits", 100, batch, None)
        assert lost.logged == 0
        again = log.record(resolved, "logits", 100, batch, None)  # a new writer process
        assert again.logged == 64 and pipe.process is not killed
        assert not log.pipe.flush()  # a writer ended since the last flush: what it held may be lost
        assert log.pipe.flush()
        assert set(_stored(db, calibrator_id, [first.ids[0], again.ids[0], lost.ids[0]])) == {
            first.ids[0], again.ids[0]}
    finally:
        log.stop()


def test_a_database_that_holds_the_writer_back_fills_the_ring_and_every_batch_said_logged_is_stored(
        calibrator, database_url):
    """The writer reads no further while its buffer (64 kB here) is full: with the chunks' table
    locked by another transaction, the ring fills and the API drops batches, answering ``logged``
    0; once the lock is let go, every batch answered as logged is stored."""
    db, calibrator_id = calibrator
    pipe = PipeWriter(_config(database_url, max_buffer_bytes=64 << 10, flush_rows=64), ring_bytes=1 << 20)
    log = PredictionLog(db, pipe=pipe)
    resolved = ResolvedVersion("piped", 1, "-", 1, calibrator_id, 1.0)
    locker = Database(database_url)
    try:
        with locker.write() as session:  # SQLite: the database's write lock; Postgres: the table's
            if locker.dialect != "sqlite":
                session.execute(text("LOCK TABLE prediction_chunks IN ACCESS EXCLUSIVE MODE"))
            else:  # a session begins on its first statement: take the connection, BEGIN IMMEDIATE
                session.connection()
            served = []
            for _ in range(150):
                served.append(log.record(resolved, "logits", 100, np.ones((64, 100), dtype=np.float32), None))
                time.sleep(0.002)
        logged = [s for s in served if s.logged]
        assert 0 < len(logged) < 150 and pipe.dropped_rows == 64 * (150 - len(logged))
        assert pipe.flush()
        assert _logged(db, calibrator_id) == 64 * len(logged)
        assert set(_stored(db, calibrator_id, [s.ids[0] for s in served])) == {s.ids[0] for s in logged}
    finally:
        locker.dispose()
        log.stop()


def test_a_record_that_is_not_one_ends_the_writer_which_stores_what_it_held_and_is_replaced(
        calibrator, database_url):
    db, calibrator_id = calibrator
    pipe = PipeWriter(_config(database_url), ring_bytes=1 << 20, restart_seconds=0.0)
    log = PredictionLog(db, pipe=pipe)
    resolved = ResolvedVersion("piped", 1, "-", 1, calibrator_id, 1.0)
    try:
        held = log.record(resolved, "logits", 3, np.ones((5, 3)), None)
        writer = pipe.process
        with pipe._lock:  # a record with a length beyond the ring, as memory gone wrong would write
            pipe._ring.memory[pipe._ring.head:pipe._ring.head + 8] = (99).to_bytes(8, "little")
            pipe._ring.head += 4096
            pipe._control(1)
        assert writer.wait(30) == 1
        assert set(_stored(db, calibrator_id, held.ids)) == set(held.ids)
        time.sleep(0.01)
        log.record(resolved, "logits", 3, np.ones((5, 3)), None)  # sees the broken pipe
        again = log.record(resolved, "logits", 3, np.full((5, 3), 2.0), None)
        assert again.logged == 5 and not pipe.flush()  # a writer ended since the last flush
        assert pipe.flush()
        assert set(_stored(db, calibrator_id, again.ids)) == set(again.ids)
    finally:
        log.stop()


def test_signals_to_the_api_process_group_do_not_reach_the_writer(calibrator, database_url):
    db, calibrator_id = calibrator
    log = PredictionLog(db, pipe=PipeWriter(_config(database_url)))
    try:
        served = log.record(ResolvedVersion("piped", 1, "-", 1, calibrator_id, 1.0), "logits", 3,
                            np.ones((5, 3)), None)
        writer = log.pipe.process
        assert os.getsid(writer.pid) == writer.pid != os.getsid(0)  # a session of its own
        assert log.pipe.flush()  # the writer is running (its handlers are set)
        os.kill(writer.pid, signal.SIGINT)
        os.kill(writer.pid, signal.SIGTERM)
        later = log.record(ResolvedVersion("piped", 1, "-", 1, calibrator_id, 1.0), "logits", 3,
                           np.ones((5, 3)), None)
        assert log.pipe.flush() and writer.poll() is None and log.pipe.process is writer
        assert set(_stored(db, calibrator_id, served.ids + later.ids)) == set(served.ids + later.ids)
    finally:
        log.stop()
    assert writer.poll() == 0


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
        from app.prediction_log.service import PredictionLog
        from app.prediction_log.pipe import PipeWriter
        from app.registry.store import ResolvedVersion
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


def test_batches_before_a_lull_are_written_without_a_flush(calibrator, database_url):
    """The ring's head goes down the pipe with a batch at most every 2 ms; the last batches before
    traffic stops go with the log thread's next announcement (every flush_seconds)."""
    db, calibrator_id = calibrator
    log = PredictionLog(db, flush_seconds=0.1, pipe=PipeWriter(_config(database_url, flush_seconds=0.1)))
    log.start()
    try:
        resolved = ResolvedVersion("piped", 1, "-", 1, calibrator_id, 1.0)
        served = [log.record(resolved, "logits", 2, np.full((3, 2), float(i)), None) for i in range(50)]
        deadline = time.monotonic() + 30
        while _logged(db, calibrator_id) < 150 and time.monotonic() < deadline:
            time.sleep(0.05)
        stored = _stored(db, calibrator_id, [batch.ids[2] for batch in served])
        assert [float(stored[batch.ids[2]][0]) for batch in served] == [float(i) for i in range(50)]
    finally:
        log.stop()


def test_a_flush_says_when_rows_could_not_be_written(calibrator, database_url):
    db, calibrator_id = calibrator
    log = PredictionLog(db, pipe=PipeWriter(_config(database_url)))
    try:
        resolved = ResolvedVersion("piped", 1, "-", 1, calibrator_id, 1.0)
        log.record(resolved, "logits", 3, np.ones((5, 3)), None)
        assert log.pipe.flush()
        gone = ResolvedVersion("gone", 1, "-", 1, calibrator_id + 1000, 1.0)  # no such calibrator: refused
        assert log.record(gone, "logits", 3, np.ones((5, 3)), None).logged == 5
        assert not log.pipe.flush()
        log.record(resolved, "logits", 3, np.ones((5, 3)), None)
        assert log.pipe.flush()
        assert _logged(db, calibrator_id) == 10
    finally:
        log.stop()


def test_closing_with_the_control_pipe_full_still_sends_the_last_head(calibrator, database_url, monkeypatch):
    """A writer held back by the database reads no control messages; with one sent every batch, the
    pipe fills and later heads are not sent. ``close`` waits for room for the last one: every batch
    answered as logged is stored once the database lets go."""
    monkeypatch.setattr(prediction_log_pipe, "ANNOUNCE_SECONDS", 0.0)
    db, calibrator_id = calibrator
    pipe = PipeWriter(_config(database_url, max_buffer_bytes=4096, flush_rows=8))
    log = PredictionLog(db, pipe=pipe)
    resolved = ResolvedVersion("piped", 1, "-", 1, calibrator_id, 1.0)
    locker = Database(database_url)
    try:
        with locker.write() as session:
            if locker.dialect != "sqlite":
                session.execute(text("LOCK TABLE prediction_chunks IN ACCESS EXCLUSIVE MODE"))
            served = [log.record(resolved, "logits", 2, np.full((4, 2), float(i)), None) for i in range(4000)]
            release = threading.Timer(1.0, session.rollback)
            release.start()
            log.stop()
            release.join()
    finally:
        locker.dispose()
    logged = [s for s in served if s.logged]
    assert len(logged) == 4000
    assert _logged(db, calibrator_id) == 4 * len(logged)


def test_the_ring_knows_the_core_s_input_kinds():
    """The writer process checks a record's kind without importing the core (``KINDS``)."""
    assert KINDS == INPUT_KINDS


def _writer_of(app) -> PipeWriter:
    return app.state.service.prediction_log.pipe


def _started(pipe: PipeWriter, seconds: float = 20.0) -> subprocess.Popen | None:
    deadline = time.monotonic() + seconds
    while pipe.process is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return pipe.process


def _named(process: subprocess.Popen, seconds: float = 20.0) -> str:
    deadline, name = time.monotonic() + seconds, ""
    while time.monotonic() < deadline:
        name = Path(f"/proc/{process.pid}/comm").read_text().strip()
        if name == "prediction-log":
            break
        time.sleep(0.05)
    return name


def test_the_writer_starts_when_logging_is_turned_on_and_at_start_up_when_a_calibrator_logs(database_url):
    """Not with the first logged batch only: while the process boots (~1 s), batches beyond the
    ring's room would be dropped, after every restart of a service under traffic."""
    settings = Settings(database_url=database_url, job_engine="embedded", log_writer="process")
    app = create_app(settings)
    with TestClient(app) as client:
        fit(client)
        time.sleep(0.5)  # the log's thread has looked (no calibrator logs): no process yet
        assert _writer_of(app).process is None
        assert client.put("/v1/calibrators/demo/logging", json={"sample_rate": 0.25}).status_code == 200
        process = _writer_of(app).process  # started by the call, before any batch
        assert process is not None and process.poll() is None
        assert _named(process) == "prediction-log"  # it names itself once booted
    assert process.wait(timeout=60) == 0  # the service's shutdown closed it

    restarted = create_app(settings)
    with TestClient(restarted):  # a calibrator logs: the process starts with the service, no batch served
        process = _started(_writer_of(restarted))
        assert process is not None and process.poll() is None
    assert process.wait(timeout=60) == 0

    with TestClient(create_app(settings)) as client:
        assert client.put("/v1/calibrators/demo/logging", json={"sample_rate": 0.0}).status_code == 200
    quiet = create_app(settings)
    with TestClient(quiet):
        log = quiet.state.service.prediction_log
        log._start_writer_if_logging()  # what its thread did at start-up, done again here
        assert log.pipe.process is None


def test_the_writer_process_s_sqlite_page_cache_is_a_setting(tmp_path, monkeypatch):
    """``CALIBRATION_LOG_WRITER_CACHE_BYTES`` reaches the writer process's database (its connections'
    ``cache_size``, in KiB); the API process's own connections keep SQLite's default."""
    monkeypatch.setenv("CALIBRATION_LOG_WRITER_CACHE_BYTES", str(8 << 20))
    url = f"sqlite:///{tmp_path}/cache.db"
    settings = Settings(database_url=url)
    api = Database(url)
    config = log_writer_process(settings, api).config
    assert config["cache_bytes"] == 8 << 20
    writer = Database(url, sqlite_cache_bytes=config["cache_bytes"])
    try:
        with writer.read() as session:
            assert session.execute(text("PRAGMA cache_size")).scalar_one() == -8192
        with api.read() as session:
            assert session.execute(text("PRAGMA cache_size")).scalar_one() == -2000  # SQLite's default
    finally:
        writer.dispose()
        api.dispose()


@pytest.mark.parametrize("digest_bytes", [16 << 20, 0])
def test_the_writer_process_closes_epochs_with_the_filters_of_their_ids_with_or_without_kept_digests(
        calibrator, database_url, monkeypatch, digest_bytes):
    """``CALIBRATION_LOG_EPOCH_DIGEST_BYTES`` reaches the writer process; with its digests (the
    default) or none kept (0: each close reads its ids back) the process closes epochs of 5 ids with
    the filter of the ids each holds, byte for byte, and every id joins its row."""
    db, calibrator_id = calibrator
    monkeypatch.setenv("CALIBRATION_LOG_EPOCH_DIGEST_BYTES", str(digest_bytes))
    config = log_writer_process(Settings(database_url=database_url), db).config
    assert config["epoch_digest_bytes"] == digest_bytes
    log = PredictionLog(db, pipe=PipeWriter(_config(database_url, epoch_ids=5, epoch_digest_bytes=digest_bytes)))
    resolved = ResolvedVersion("piped", 1, "-", 1, calibrator_id, 1.0)
    batches = [[f"b{i}-{j}" for j in range(3)] for i in range(6)]
    try:
        for number, ids in enumerate(batches):
            log.record(resolved, "logits", 2, np.full((3, 2), float(number)), ids)
            assert log.pipe.flush()
    finally:
        log.stop()  # the process closes its open epoch as it ends
    with db.read() as session:
        epochs = session.execute(select(PredictionEpochRow.id, PredictionEpochRow.n_ids, PredictionEpochRow.bloom)
                                 .order_by(PredictionEpochRow.id)).all()
        for epoch_id, n_ids, data in epochs:
            held = list(session.scalars(text("SELECT prediction_id FROM logged_predictions WHERE epoch_id = :e"),
                                        {"e": epoch_id}))
            assert n_ids == len(held) > 0 and data == bloom.build(held)
    assert len(epochs) >= 3
    stored = _stored(db, calibrator_id, [pid for ids in batches for pid in ids])
    assert {pid: float(row[0]) for pid, row in stored.items()} == {
        pid: float(number) for number, ids in enumerate(batches) for pid in ids}


@contextlib.contextmanager
def _no_file_descriptors_left():
    """Every file descriptor this process may open taken (the soft limit lowered to those open, the
    gaps below it filled), so the next ``os.pipe`` or ``memfd_create`` fails with EMFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1, hard))
    taken = []
    try:
        with contextlib.suppress(OSError):
            while True:
                taken.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_restart_that_fails_does_not_forget_that_batches_were_lost(calibrator, database_url):
    """A writer ended with batches it had not written; turning logging on again then fails to start
    one (no file descriptors left): the next flush still says that rows were lost."""
    db, calibrator_id = calibrator
    pipe = PipeWriter(_config(database_url), ring_bytes=1 << 20, restart_seconds=0.0)
    log = PredictionLog(db, pipe=pipe)
    resolved = ResolvedVersion("piped", 1, "-", 1, calibrator_id, 1.0)
    try:
        log.record(resolved, "logits", 3, np.ones((5, 3)), None)
        writer = pipe.process
        writer.send_signal(signal.SIGKILL)  # before its flush (flush_seconds 60): the batch is lost
        writer.wait(30)
        time.sleep(0.01)
        assert log.record(resolved, "logits", 3, np.ones((5, 3)), None).logged == 0  # sees the broken pipe
        with _no_file_descriptors_left():
            pipe.start()
        assert pipe.process is writer  # none started: the ring's memfd could not be made
        assert not pipe.flush()
    finally:
        log.stop()
