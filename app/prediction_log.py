"""The prediction log: calibrated inputs kept, with prediction ids, until their labels arrive.

Logging is off the request path. ``record`` (on the hot path) keeps a served batch whole with
the calibrator's rate as its probability, copies it into an in-memory buffer and returns at once; a
background thread writes the buffer every ``flush_seconds`` (or sooner once ``flush_rows``
rows wait), one chunk per (calibrator, version) in one transaction each. The buffer is bounded
by ``max_buffer_bytes``: rows beyond it are dropped and counted, never queued without bound.
Each client id is one index row; a batch of generated ids is one index row for the whole batch
(``prediction_log_store.log_predictions``, migration 0009): at 64 rows a request, the writer's
per-id B-tree inserts were most of what logging cost the server.
A label call flushes this process's buffer first (``flush``), so a label posted right after its
prediction finds it; with several processes a label can reach one whose prediction is still in
another's buffer (at most ``flush_seconds``): it is reported ``unknown`` and can be posted again.
The same thread applies the retention settings (observations and the log) every
``retention_interval`` seconds.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import random
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

import numpy as np

from . import observation_store, prediction_log_store
from .db import Database
from .errors import InvalidInput
from .models import utcnow
from .store import ResolvedVersion

logger = logging.getLogger(__name__)
MAX_ID_LENGTH = 128


def check_ids(ids: list[str], n: int) -> None:
    """Client prediction ids: one per row, distinct, 1-128 printable ASCII characters, no comma,
    and not of the form of the service's generated ids (``new_prefix``: those name rows of a
    logged batch, and a client id of that form would stand beside its first prediction)."""
    if len(ids) != n:
        raise InvalidInput(f"ids has {len(ids)} entries for {n} rows")
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


def name_thread(name: str) -> None:
    """Give the calling thread ``name`` (15 bytes at most) for the OS, on Linux: ``top -H`` and
    ``/proc/<pid>/task/<tid>/comm`` then tell the log's writer from the hot path's pool threads,
    whose CPU time the live benchmark (``benchmarks/prediction_log.py``) reports apart."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME


@dataclass(frozen=True, slots=True)
class Served:
    """A served batch of ``n`` rows as the prediction log saw it: the client's ``client_ids``, or
    generated ids (``prefix`` and the row number), and how many rows it ``logged`` (0 or ``n``)."""

    n: int
    logged: int
    client_ids: list[str] | None = None
    prefix: str | None = None

    @property
    def ids(self) -> list[str]:
        """Every row's id (built only when asked: a binary answer carries just the prefix)."""
        if self.client_ids is not None:
            return self.client_ids
        return [f"{self.prefix}{i}" for i in range(self.n)]


def log_served(log: PredictionLog | None, loaded, kind: str, values, ids: list[str] | None) -> Served | None:
    """Hand a served batch to the prediction log when the calibrator logs, else ``None``; client
    ids are checked either way."""
    if ids is not None:
        check_ids(ids, len(values))
    if loaded.resolved.log_rate <= 0 or log is None:
        return None
    return log.record(loaded.resolved, kind, loaded.calibrator.n_classes_, values, ids)


@dataclass
class _Pending:
    calibrator_id: int
    version: int
    kind: str
    n_classes: int
    inputs: np.ndarray
    ids: list[str | None] | None  # the client's, one index row each (None: none); else generated:
    prefix: str | None = None  # the ids are this prefix and the row number: one index row in all


@dataclass
class LogStats:
    buffered_rows: int = 0
    buffered_bytes: int = 0
    written_rows: int = 0
    dropped_rows: int = 0
    failed_rows: int = 0


class PredictionLog:
    def __init__(self, db: Database, flush_rows: int = 4096, flush_seconds: float = 1.0,
                 max_buffer_bytes: int = 256 << 20, observation_retention_days: float = 0.0,
                 log_retention_days: float = 30.0, retention_interval: float = 3600.0):
        self.db = db
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self.max_buffer_bytes = max_buffer_bytes
        self.observation_retention_days = observation_retention_days
        self.log_retention_days = log_retention_days
        self.retention_interval = retention_interval
        self.stats = LogStats()
        self._pending: list[_Pending] = []
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the hot path ------------------------------------------------------------------------

    def record(self, resolved: ResolvedVersion, kind: str, n_classes: int, values, ids: list[str] | None
               ) -> Served:
        """Keep the whole batch with probability ``resolved.log_rate`` (one draw a request), else
        nothing, and buffer what is kept with its ids (the client's, or generated).

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
        inputs = inputs.astype(np.float64) if inputs.dtype.kind != "f" else inputs.copy()
        with self._lock:
            if self.stats.buffered_bytes + inputs.nbytes > self.max_buffer_bytes:
                self.stats.dropped_rows += n
                return Served(n, 0, ids, prefix)
            self._pending.append(_Pending(resolved.calibrator_id, resolved.version, kind, n_classes,
                                          inputs, ids, prefix))
            self.stats.buffered_rows += n
            self.stats.buffered_bytes += inputs.nbytes
            full = self.stats.buffered_rows >= self.flush_rows
        if full:
            self._wake.set()
        return Served(n, n, ids, prefix)

    # -- the writer ----------------------------------------------------------------------------

    def _take(self) -> list[_Pending]:
        with self._lock:
            pending, self._pending = self._pending, []
            self.stats.buffered_rows = self.stats.buffered_bytes = 0
        return pending

    def flush(self) -> int:
        """Write everything buffered now (and wait for a write in progress); returns rows written."""
        with self._write_lock:
            pending = self._take()
            self._drop_repeated_ids(pending)
            groups: dict[tuple, list[_Pending]] = {}
            for item in pending:
                groups.setdefault((item.calibrator_id, item.version, item.kind, item.n_classes,
                                   item.inputs.dtype.str), []).append(item)
            written = 0
            for (calibrator_id, version, kind, n_classes, _), items in groups.items():
                items.sort(key=lambda item: item.prefix is not None)  # client ids first: rows 0..m-1
                rows = sum(len(item.inputs) for item in items)
                ids, batches = self._index(items)
                try:
                    with self.db.write() as session:
                        prediction_log_store.log_predictions(
                            session, calibrator_id, version, kind, n_classes,
                            np.concatenate([item.inputs for item in items]), ids, batches)
                    written += rows
                except Exception as exc:  # a deleted calibrator, the database away: counted, logged
                    self.stats.failed_rows += rows
                    logger.warning("prediction log: %d rows of calibrator %d not written: %s", rows,
                                   calibrator_id, str(exc).splitlines()[0])
            self.stats.written_rows += written
            return written

    @staticmethod
    def _drop_repeated_ids(pending: list[_Pending]) -> None:
        """A client id served twice before a flush keeps its first serving, as across flushes
        (where the stored row wins): the chunks are written grouped by version, not in serving
        order, so a later serving's id becomes ``None`` (its row is kept, without an index row)."""
        seen: set[str] = set()
        for item in pending:
            if item.ids is None:
                continue
            if not seen.isdisjoint(item.ids):
                item.ids = [None if pid in seen else pid for pid in item.ids]
            seen.update(pid for pid in item.ids if pid is not None)

    @staticmethod
    def _index(items: list[_Pending]) -> tuple[list[str], list[tuple]]:
        """The index rows of items written as one chunk, client ids' items first: the client ids
        (of rows 0, 1, ...), and ``(prefix, first row, n)`` of batches of generated ids."""
        ids, batches, offset = [], [], 0
        for item in items:
            if item.prefix is not None:
                batches.append((item.prefix, offset, len(item.inputs)))
            else:
                ids.extend(item.ids)
            offset += len(item.inputs)
        return ids, batches

    def apply_retention(self) -> None:
        now = utcnow()
        with self.db.write() as session:
            if self.observation_retention_days > 0:
                observation_store.delete_before(session, None, now - timedelta(days=self.observation_retention_days))
            if self.log_retention_days > 0:
                prediction_log_store.delete_predictions_before(session, now - timedelta(days=self.log_retention_days))

    def _run(self) -> None:
        name_thread("prediction-log")
        next_retention = time.monotonic()
        while not self._stop.is_set():
            self._wake.wait(self.flush_seconds)
            self._wake.clear()
            self.flush()
            if time.monotonic() >= next_retention:
                try:
                    self.apply_retention()
                except Exception as exc:
                    logger.warning("retention not applied: %s", str(exc).splitlines()[0])
                next_retention = time.monotonic() + self.retention_interval

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="prediction-log", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the writer and write what is still buffered."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.flush()
