"""The prediction log's buffer and its writer: served batches kept in memory and written in chunks.

``keep`` adds a batch to the buffer (bounded by ``max_buffer_bytes``: batches beyond it are dropped
and counted, never queued without bound); ``flush`` writes what waits, one chunk per (calibrator,
version) in one transaction each (``prediction_log_store.log_predictions``; of a chunk that would take
the calibrator's log past ``max_logged_rows`` only the rows that fit are written, the rest counted
as dropped for that calibrator: serving goes on, and logging resumes once retention frees room),
into the epoch of the
id index that ``epochs`` keeps open for the calibrator (``app.prediction_log.epochs``, closed once
full); ``run_once`` is a turn of the writer's loop: a flush every ``flush_seconds``, or sooner
once ``flush_rows`` rows or ``flush_bytes`` bytes of inputs wait or a flush was asked for
(``ask_flush``, answered once what was kept before it is written).

A flush costs a fixed part (a transaction of five statements, its commit) besides its bytes and
ids, so the thresholds bound the chunk by its bytes (``flush_bytes``) rather than by a row count
that suits one width of batch: a chunk of a few MiB amortises that part over hundreds of requests
and still stays far below what one blob may hold.

It runs in the writer process (``app.prediction_log.process``, the default) or, with
``log_writer="thread"`` or an in-memory database, on a thread of the API process.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..platform.db import Database
from ..platform.logs import first_line
from . import store as prediction_log_store
from .epochs import EpochWriter

logger = logging.getLogger(__name__)


def name_thread(name: str) -> None:
    """Give the calling thread ``name`` (15 bytes at most) for the OS, on Linux: ``top -H`` and
    ``/proc/<pid>/task/<tid>/comm`` then tell the log's writer from the hot path's pool threads,
    whose CPU time the live benchmark (``benchmarks/prediction_log.py``) reports apart."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME


class LogFull(Exception):
    """A calibrator's log holds ``max_logged_rows``: the chunk's transaction is rolled back."""


@dataclass
class Pending:
    """A served batch waiting to be written: its inputs and ids."""

    calibrator_id: int
    version: int
    kind: str
    n_classes: int
    inputs: np.ndarray
    ids: Sequence[str | None] | None  # the client's, one index row each (None: none); else generated:
    prefix: str | None = None  # the ids are this prefix and the row number: one index row in all


@dataclass
class LogStats:
    buffered_rows: int = 0
    buffered_bytes: int = 0
    written_rows: int = 0
    dropped_rows: int = 0
    failed_rows: int = 0
    capped_rows: int = 0  # not written: the calibrator's log held max_logged_rows (counted for it too)


def first_rows(items: list[Pending], room: int) -> list[Pending]:
    """The first ``room`` rows of ``items``: whole items, then the first rows of one (its ids cut
    with them; a batch of generated ids keeps its prefix, its ids being row numbers)."""
    kept = []
    for item in items:
        if room <= 0:
            break
        if len(item.inputs) > room:
            ids = None if item.ids is None else item.ids[:room]
            item = dataclasses.replace(item, inputs=item.inputs[:room], ids=ids)
        kept.append(item)
        room -= len(item.inputs)
    return kept


class LogBuffer:
    def __init__(self, db: Database | None, flush_rows: int = 65536, flush_seconds: float = 1.0,
                 max_buffer_bytes: int = 256 << 20, epochs: EpochWriter | None = None,
                 max_logged_rows: int = 10_000_000, flush_bytes: int = 8 << 20):
        self.db = db
        self.flush_bytes = flush_bytes
        self.max_logged_rows = max_logged_rows
        self.epochs = epochs if epochs is not None else EpochWriter()
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self.max_buffer_bytes = max_buffer_bytes
        self.stats = LogStats()
        self._pending: list[Pending] = []
        self._asked: list[Callable[[], None]] = []  # answers to flushes asked for, in order
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # notified when a write takes the buffer
        self._write_lock = threading.Lock()
        self._wake = threading.Event()

    def keep(self, item: Pending, wait: bool = False) -> bool:
        """Buffer ``item`` unless the buffer is full: then it is counted as dropped or, with
        ``wait``, kept once a write has made room (an item larger than the whole buffer is dropped
        either way); wakes the writer once ``flush_rows`` rows or ``flush_bytes`` bytes wait."""
        n = len(item.inputs)
        with self._lock:
            while self.stats.buffered_bytes + item.inputs.nbytes > self.max_buffer_bytes:
                if not (wait and self._pending):
                    self.stats.dropped_rows += n
                    return False
                self._wake.set()
                self._room.wait(1.0)
            self._pending.append(item)
            self.stats.buffered_rows += n
            self.stats.buffered_bytes += item.inputs.nbytes
            full = self.stats.buffered_rows >= self.flush_rows or self.stats.buffered_bytes >= self.flush_bytes
        if full:
            self._wake.set()
        return True

    def ask_flush(self, answer: Callable[[], None]) -> None:
        """Have the writer flush soon and call ``answer`` once what was kept until now is written."""
        with self._lock:
            self._asked.append(answer)
        self._wake.set()

    def _take(self) -> list[Pending]:
        with self._lock:
            pending, self._pending = self._pending, []
            self.stats.buffered_rows = self.stats.buffered_bytes = 0
            self._room.notify_all()
        return pending

    def flush(self) -> int:
        """Write everything buffered now (and wait for a write in progress); returns rows written."""
        with self._write_lock:
            pending = self._take()
            self._drop_repeated_ids(pending)
            groups: dict[tuple, list[Pending]] = {}
            for item in pending:
                groups.setdefault((item.calibrator_id, item.version, item.kind, item.n_classes,
                                   item.inputs.dtype.str), []).append(item)
            written = 0
            for (calibrator_id, version, kind, n_classes, _), items in groups.items():
                items.sort(key=lambda item: item.prefix is not None)  # client ids first: rows 0..m-1
                rows = sum(len(item.inputs) for item in items)
                try:
                    kept = self._write(calibrator_id, version, kind, n_classes, items, rows)
                    written += kept
                    self.stats.capped_rows += rows - kept
                except Exception as exc:  # a deleted calibrator, the database away: counted, logged
                    self.epochs.rolled_back(calibrator_id)
                    self.stats.failed_rows += rows
                    logger.warning("prediction log: %d rows of calibrator %d not written: %s", rows,
                                   calibrator_id, first_line(exc))
            self.stats.written_rows += written
            if self.db is not None:  # without one no epoch was opened
                self.epochs.close_full(self.db)
            return written

    def _write(self, calibrator_id: int, version: int, kind: str, n_classes: int, items: list[Pending],
               rows: int) -> int:
        """Write the first rows of ``items`` that fit in the calibrator's log (``max_logged_rows``)
        as one chunk, and count the rest as dropped for it; returns the rows written."""
        db = self._database()
        try:
            with db.write() as session:
                items = first_rows(items, prediction_log_store.room(session, calibrator_id, self.max_logged_rows))
                kept = sum(len(item.inputs) for item in items)
                if kept:
                    ids, batches = self._index(items)
                    epoch_id = self.epochs.epoch_for(session, calibrator_id)
                    index_rows = prediction_log_store.log_predictions(
                        session, calibrator_id, version, kind, n_classes,
                        np.concatenate([item.inputs for item in items]), ids, batches, epoch_id)
                    self.epochs.wrote(calibrator_id, prediction_log_store.index_keys(ids, batches))
                    if not prediction_log_store.reserve_rows(session, calibrator_id, kept, self.max_logged_rows):
                        raise LogFull  # another writer took the room meanwhile: nothing of this chunk stays
                if kept < rows:
                    prediction_log_store.count_dropped(session, calibrator_id, rows - kept)
        except LogFull:
            self.epochs.rolled_back(calibrator_id)
            with db.write() as session:
                prediction_log_store.count_dropped(session, calibrator_id, rows)
            return 0
        if kept:
            self.epochs.committed(calibrator_id, index_rows)
        return kept

    def close_epochs(self) -> None:
        """Close every epoch this writer holds open (it stops), after the write in progress."""
        with self._write_lock:
            if self.db is not None:  # without one no epoch was opened
                self.epochs.close_all(self.db)

    def _database(self) -> Database:
        if self.db is None:
            raise RuntimeError("this prediction log has no database to write to")
        return self.db

    @staticmethod
    def _drop_repeated_ids(pending: list[Pending]) -> None:
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
    def _index(items: list[Pending]) -> tuple[list[str | None], list[tuple[str, int, int]]]:
        """The index rows of items written as one chunk, client ids' items first: the client ids
        (of rows 0, 1, ...), and ``(prefix, first row, n)`` of batches of generated ids."""
        ids: list[str | None] = []
        batches: list[tuple[str, int, int]] = []
        offset = 0
        for item in items:
            if item.prefix is not None:
                batches.append((item.prefix, offset, len(item.inputs)))
            elif item.ids is not None:
                ids.extend(item.ids)
            else:
                raise TypeError("a logged batch has client ids or a prefix")
            offset += len(item.inputs)
        return ids, batches

    def run_once(self) -> None:
        """Wait for the next flush (its time, ``flush_rows`` rows or ``flush_bytes`` bytes, or one
        asked for), write, and answer the flushes asked for before it began."""
        self._wake.wait(self.flush_seconds)
        self._wake.clear()
        with self._lock:
            asked, self._asked = self._asked, []
        self.flush()
        for answer in asked:
            answer()
