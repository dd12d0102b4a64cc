"""The prediction log: calibrated inputs kept, with prediction ids, until their labels arrive.

Logging is off the request path. ``record`` (on the hot path) keeps a served batch whole with
the calibrator's rate as its probability and hands it to the writer: by default a process of its
own (``app.prediction_log.pipe``: a copy into a ring in shared memory, no interpreter lock shared
with the event loop), else (``log_writer="thread"``, an in-memory SQLite database, which another
process cannot open, or not Linux) a bounded in-memory buffer that a thread of this process writes
(``app.prediction_log.buffer``). Either writes every ``flush_seconds`` (or sooner once
``flush_rows`` rows or ``flush_bytes`` bytes wait), one chunk per (calibrator, version) in one transaction each; rows
beyond ``max_buffer_bytes`` (or a full ring) are dropped and counted, never queued without bound.
Each client id is one index row; a batch of generated ids is one index row for the whole batch
(``prediction_log_store.log_predictions``, migration 0009): at 64 rows a request, the writer's
per-id B-tree inserts were most of what logging cost the server.
A label call flushes this process's log first (``flush``), so a label posted right after its
prediction finds it; with several processes a label can reach one whose prediction is still in
another's buffer (at most ``flush_seconds``): it is reported ``unknown`` and can be posted again.
This process's ``prediction-log`` thread applies the retention settings (observations and the log)
every ``retention_interval`` seconds and, at start-up, starts the writer process when a calibrator
logs (as turning logging on does): a process that boots with the first batch (~1 s) drops what
does not fit in its ring meanwhile, after every restart of a service under traffic.
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from datetime import timedelta

import numpy as np

from ..observations import reads as observations
from ..platform.db import Database
from ..platform.errors import InvalidInput
from ..platform.logs import first_line
from ..platform.rows import utcnow
from ..registry.names import ResolvedVersion
from ..wire.batches import Served
from . import epoch_store as prediction_epoch_store
from . import store as prediction_log_store
from .buffer import LogBuffer, LogStats, Pending, name_thread
from .epochs import EpochFilters, EpochWriter
from .pipe import PipeWriter

logger = logging.getLogger(__name__)
MAX_ID_LENGTH = 128


# a generated id (``prediction_log_store.GENERATED``) among client ids joined by commas, after a
# leading comma: a literal first character, which the regex engine finds by scanning (~2 us for 64
# ids; starting with ``(?:\A|,)`` instead tries every position, ~20 us)
GENERATED_IN_JOINED = re.compile(rb",[0-9a-f]{16}-(?:0|[1-9][0-9]{0,8})(?=,)")
PRINTABLE_ASCII = bytes(range(0x20, 0x7F))


def check_ids(ids: list[str], n: int) -> None:
    """Client prediction ids: one per row, distinct, 1-128 printable ASCII characters, no comma,
    and not of the form of the service's generated ids (``new_prefix``: those name rows of a
    logged batch, and a client id of that form would stand beside its first prediction).

    On the hot path (every calibrate call with ids, logging on or off), so the ids are checked
    together first, as one string with a comma before and after each: a few scans of it (~8 us
    for 64 ids, against ~17 us for a check of each id). Ids with a space in them, and any fault,
    go to ``_check_each``, which names the fault."""
    if len(ids) != n:
        raise InvalidInput(f"ids has {len(ids)} entries for {n} rows")
    joined = "," + ",".join(ids) + ","
    if joined.isascii() and " " not in joined:
        data = joined.encode()
        distinct = set(ids)
        if (not data.translate(None, PRINTABLE_ASCII) and data.count(b",") == n + 1  # no comma in an id
                and len(distinct) == n and "" not in distinct and max(map(len, ids), default=0) <= MAX_ID_LENGTH
                and not GENERATED_IN_JOINED.search(data)):
            return
    _check_each(ids, n)


def _check_each(ids: list[str], n: int) -> None:
    """``check_ids`` one id at a time: raises for the first id at fault (or a repeated one)."""
    for pid in ids:
        if not (0 < len(pid) <= MAX_ID_LENGTH and pid.isascii() and pid.isprintable() and "," not in pid
                and pid.strip() == pid):
            raise InvalidInput(f"prediction id {pid[:40]!r} must be 1-{MAX_ID_LENGTH} printable ASCII "
                               "characters without commas or surrounding spaces")
        if prediction_log_store.GENERATED.fullmatch(pid):
            raise InvalidInput(f"prediction id {pid!r} has the form of the ids the service generates (16 hex "
                               "digits, '-', a row number): those are reserved; name your rows otherwise")
    if len(set(ids)) != n:
        raise InvalidInput("prediction ids must be distinct within a batch")


def new_prefix() -> str:
    """The prefix of a batch's generated ids: a random 64-bit number in hex and ``-``; row ``i``'s
    id is the prefix and ``i`` (``3f9c…-0``, ``3f9c…-1``).

    From ``random``'s generator (seeded from the OS, reseeded in a forked child), not ``secrets``:
    ids need to be distinct, not secret, and ``os.urandom`` releases the GIL for its system call,
    a hand-over to the log's writer thread on every request."""
    return f"{random.getrandbits(64):016x}-"


def log_served(log: PredictionLog | None, loaded, kind: str, values, ids: list[str] | None) -> Served | None:
    """Hand a served batch to the prediction log when the calibrator logs, else ``None``; client
    ids are checked either way."""
    if ids is not None:
        check_ids(ids, len(values))
    if loaded.resolved.log_rate <= 0 or log is None:
        return None
    return log.record(loaded.resolved, kind, loaded.calibrator.n_classes_, values, ids)


class PredictionLog:
    """The hot path's end of the log (``record``), its flush for label joins, and the retention
    thread; batches go to the writer process (``pipe``, ``app.prediction_log.pipe``) or, without
    one, to a buffer written by this thread (``app.prediction_log.buffer``)."""

    def __init__(self, db: Database | None, flush_rows: int = 65536, flush_seconds: float = 1.0,
                 max_buffer_bytes: int = 256 << 20, observation_retention_days: float = 0.0,
                 log_retention_days: float = 30.0, retention_interval: float = 3600.0,
                 pipe: PipeWriter | None = None, epochs: EpochWriter | None = None,
                 epoch_filters: EpochFilters | None = None, epoch_idle_seconds: float = 3600.0,
                 max_logged_rows: int = 10_000_000, flush_bytes: int = 8 << 20):
        self.db = db
        self.epoch_idle_seconds = epoch_idle_seconds
        self.max_logged_rows = max_logged_rows
        self.buffer = LogBuffer(db, flush_rows, flush_seconds, max_buffer_bytes, epochs, max_logged_rows, flush_bytes)
        self.epoch_filters = epoch_filters if epoch_filters is not None else EpochFilters()
        self.pipe = pipe
        self.observation_retention_days = observation_retention_days
        self.log_retention_days = log_retention_days
        self.retention_interval = retention_interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def stats(self) -> LogStats:
        """The counts of the buffer a thread of this process writes (without a writer process);
        with one, ``pipe.dropped_rows`` counts what it was not handed, and it logs what it could
        not write."""
        return self.buffer.stats

    # -- the hot path ------------------------------------------------------------------------

    def record(self, resolved: ResolvedVersion, kind: str, n_classes: int, values, ids: list[str] | None
               ) -> Served:
        """Keep the whole batch with probability ``resolved.log_rate`` (one draw a request), else
        nothing, and hand what is kept with its ids (the client's, or generated) to the writer.

        Sampling is by request, not by row: each row is still kept with probability
        ``log_rate``, so the log is an unbiased sample of what was served (rows of one request
        are kept or dropped together), and at 10% nine requests in ten cost the hot path one
        draw instead of a draw per row, a copy of the kept rows and an index row for the writer
        (``benchmarks/prediction_log.py``)."""
        n = len(values)
        prefix = new_prefix() if ids is None else None
        if n == 0 or (resolved.log_rate < 1.0 and random.random() >= resolved.log_rate):
            return Served(n, 0, ids, prefix)
        inputs = np.asarray(values)
        if inputs.dtype.kind != "f" or inputs.dtype.itemsize not in (2, 4, 8):
            inputs = inputs.astype(np.float64)
        elif self.pipe is None:  # the buffer keeps it past the request (the ring is a copy already)
            inputs = inputs.copy()
        item = Pending(resolved.calibrator_id, resolved.version, kind, n_classes, inputs, ids, prefix)
        kept = self.pipe.put(item) if self.pipe is not None else self.buffer.keep(item)
        return Served(n, n if kept else 0, ids, prefix)

    def flush(self) -> int:
        """Write everything served until now before returning: this thread's buffer (returns the
        rows it wrote) or, with a writer process, everything handed to it (returns 0; logs a
        warning where the process could not confirm it, and a label whose prediction is not
        stored yet is then answered ``unknown``)."""
        if self.pipe is not None:
            if not self.pipe.flush():
                logger.warning("prediction log: the writer process did not confirm that what was served "
                               "before is stored (see its warnings)")
            return 0
        return self.buffer.flush()

    def _database(self) -> Database:
        if self.db is None:
            raise RuntimeError("this prediction log has no database")
        return self.db

    def apply_retention(self) -> None:
        now = utcnow()
        db = self._database()
        with db.write() as session:
            if self.observation_retention_days > 0:
                observations.delete_before(session, None, now - timedelta(days=self.observation_retention_days))
            if self.log_retention_days > 0:
                prediction_log_store.delete_predictions_before(session, now - timedelta(days=self.log_retention_days))
            stale = prediction_epoch_store.stale(session, now - timedelta(seconds=self.epoch_idle_seconds))
        # epochs left open or idle (a writer stopped, or ids logged before 0011), each in a
        # transaction of its own: a close reads all its ids, and writers wait for it on SQLite
        for epoch_id in stale:
            with db.write() as session:
                prediction_epoch_store.close(session, epoch_id)

    def _run(self) -> None:
        name_thread("prediction-log")
        if self.pipe is not None:
            self._start_writer_if_logging()
        next_retention = time.monotonic()
        while not self._stop.is_set():
            if self.pipe is None:
                self.buffer.run_once()
            else:  # the writer process writes on its own; the last batches before a lull go to it
                self._stop.wait(self.buffer.flush_seconds)
                self.pipe.announce()
            if time.monotonic() >= next_retention:
                try:
                    self.apply_retention()
                except Exception as exc:
                    logger.warning("retention not applied: %s", first_line(exc))
                next_retention = time.monotonic() + self.retention_interval

    def start_writer(self) -> None:
        """Start the writer process now (when logging is turned on), not with the first batch it is
        handed (``PipeWriter.start``); nothing without one."""
        if self.pipe is not None:
            self.pipe.start()

    def _start_writer_if_logging(self) -> None:
        """At start-up, start the writer process at once when a calibrator logs: after a restart
        under traffic, the first batches would otherwise wait for the process to boot, and those
        beyond the ring's room be dropped."""
        try:
            with self._database().read() as session:
                logging_on = prediction_log_store.any_logging(session)
        except Exception as exc:  # the database away at start-up: the first batch starts it
            logger.warning("prediction log: could not tell whether a calibrator logs: %s", first_line(exc))
            return
        if logging_on:
            self.start_writer()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="prediction-log", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and write what is still buffered (the writer process: what it holds)."""
        self._stop.set()
        self.buffer.ask_flush(lambda: None)  # wakes the thread
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.pipe is not None:
            self.pipe.close()
        elif self.db is not None:
            self.buffer.flush()
            self.buffer.close_epochs()
