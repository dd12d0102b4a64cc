"""Epochs of the prediction log's id index: the writer's side (``EpochWriter``: which epoch a flush
writes into, and when to close it) and the lookups' side (``EpochFilters``: which epochs may hold
an id).

The index is keyed ``(calibrator_id, epoch_id, prediction_id)`` (migration 0011). A writer fills one
open epoch per calibrator, so random client ids (UUIDs) land on that epoch's few pages, not on a
random page of the whole index each (on SQLite 3.3 us an id at any size instead of ~43 us at
1.3 M ids and rising: ``benchmarks/id_index_keys.py``). After ``max_ids`` index rows the writer
closes it (and every epoch it holds when it stops; retention closes one left open, or idle, for
long): a Bloom filter of its ids is stored with it (``app.prediction_log.bloom``, 10 to 20 bits an id: false
positives 0.8% at most, 0.07% for a full epoch of 65536). A lookup then reads the index only in
the open epochs and in the closed ones whose filter may hold the id; an id logged in several
epochs joins its first chunk.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

import numpy as np
from sqlalchemy.orm import Session

from ..platform.db import Database
from ..platform.logs import first_line
from . import bloom
from . import epoch_store as prediction_epoch_store

logger = logging.getLogger(__name__)


class EpochWriter:
    """The open epoch of each calibrator one writer writes into (one writer per process: epochs
    are never shared, so each writer's ids fill pages of their own), closed once it holds
    ``max_ids`` index rows, or when the writer stops (``close_all``).

    It keeps the BLAKE2b digests of the ids each committed transaction wrote into an open epoch
    (``wrote`` before the commit, ``committed`` after it; 16 bytes an id, at most ``kept_digests``
    ids over all its epochs: ``CALIBRATION_LOG_EPOCH_DIGEST_BYTES`` / 16) and closes the epoch with
    them (``epoch_store.close``) instead of reading its ids back. Where they may be incomplete (a
    transaction that wrote without ``wrote``, one that failed after writing into an epoch already
    open: its commit may have landed) or would pass the budget, that epoch's close reads the ids
    back, as a close by retention does."""

    def __init__(self, max_ids: int = 65536, kept_digests: int = 1 << 20):
        if max_ids < 1:
            raise ValueError(f"an epoch needs max_ids >= 1, not {max_ids}")
        self.max_ids = max_ids
        self.kept_digests = kept_digests  # ids, over all open epochs: 16 MiB of digests by default
        self._open: dict[int, list[int]] = {}  # calibrator id -> [epoch id, index rows committed]
        self._opened: dict[int, int] = {}  # epochs opened by the transaction in progress
        # calibrator id -> the raw digests of every id committed into its open epoch; None: not all known
        self._digests: dict[int, bytearray | None] = {}
        self._kept = 0  # ids whose digests are kept, over all epochs
        self._staged: dict[int, list[str]] = {}  # the ids the transaction in progress wrote

    def epoch_for(self, session: Session, calibrator_id: int) -> int:
        """The epoch that ``calibrator_id``'s ids go into, in this transaction: this writer's open
        one, else (none yet, or closed by retention meanwhile) a new one."""
        current = self._open.get(calibrator_id)
        if current is not None and prediction_epoch_store.mark_written(session, current[0], calibrator_id):
            return current[0]
        epoch_id = prediction_epoch_store.open_epoch(session, calibrator_id)
        self._opened[calibrator_id] = epoch_id
        return epoch_id

    def wrote(self, calibrator_id: int, keys: list[str]) -> None:
        """The transaction in progress wrote ``keys`` (every index row's ``prediction_id``) into
        ``calibrator_id``'s epoch (their digests are taken once it committed, outside it)."""
        self._staged[calibrator_id] = keys

    def committed(self, calibrator_id: int, index_rows: int) -> None:
        """The transaction that wrote ``index_rows`` rows into ``calibrator_id``'s epoch committed."""
        if calibrator_id in self._opened:
            self._open[calibrator_id] = [self._opened.pop(calibrator_id), 0]
            self._set_digests(calibrator_id, bytearray())
        self._open[calibrator_id][1] += index_rows
        staged = self._staged.pop(calibrator_id, None)
        kept = self._digests.get(calibrator_id)
        if kept is None or (staged is None and not index_rows):
            return
        if staged is None or self._kept + len(staged) > self.kept_digests:
            self._set_digests(calibrator_id, None)
            return
        kept += bloom.raw_digests(staged)
        self._kept += len(staged)

    def rolled_back(self, calibrator_id: int) -> None:
        """It rolled back: an epoch it opened does not exist (its id may be handed out again). In an
        epoch already open the rows it wrote may stand all the same (a commit whose answer was lost):
        its close reads the ids back."""
        self._staged.pop(calibrator_id, None)
        if self._opened.pop(calibrator_id, None) is None and calibrator_id in self._open:
            self._set_digests(calibrator_id, None)

    def _set_digests(self, calibrator_id: int, digests: bytearray | None) -> None:
        """Replace the digests kept for ``calibrator_id``'s epoch, keeping the count of all in step."""
        old = self._digests.get(calibrator_id)
        self._kept -= 0 if old is None else len(old) // 16
        self._digests[calibrator_id] = digests

    def close_full(self, db: Database) -> int:
        """Close the epochs holding ``max_ids`` index rows; returns how many."""
        return self._close(db, [c for c, (_, n) in self._open.items() if n >= self.max_ids])

    def close_all(self, db: Database) -> int:
        """Close every open epoch (the writer stops); returns how many."""
        return self._close(db, list(self._open))

    def _close(self, db: Database, calibrator_ids: list[int]) -> int:
        closed = 0
        for calibrator_id in calibrator_ids:
            epoch_id = self._open[calibrator_id][0]
            kept = self._digests.get(calibrator_id)
            try:
                with db.write() as session:
                    prediction_epoch_store.close(session, epoch_id,
                                                 digests=None if kept is None else bloom.halves(kept))
            except Exception as exc:  # the database away: the next flush tries again
                logger.warning("prediction log: epoch %d not closed: %s", epoch_id, first_line(exc))
                continue
            del self._open[calibrator_id]
            self._set_digests(calibrator_id, None)
            del self._digests[calibrator_id]
            closed += 1
        return closed


class EpochFilters:
    """The Bloom filters of closed epochs, read once and kept (a closed epoch's filter never
    changes) up to ``max_bytes`` (least recently used first out; 0 keeps none)."""

    def __init__(self, max_bytes: int = 256 << 20):
        self.max_bytes = max_bytes
        self._kept: OrderedDict[int, tuple[bytes, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def candidates(self, session: Session, calibrator_id: int, keys: list[str]) -> list[tuple[int, str]]:
        """``(epoch id, key)`` of every epoch that may hold a key: all keys for an open epoch, for
        a closed one the keys its filter may hold."""
        epochs = prediction_epoch_store.listed(session, calibrator_id)
        if not keys or not epochs:
            return []
        filters = self._filters(session, [epoch_id for epoch_id, hashes in epochs if hashes is not None])
        probe = bloom.Probe(keys)
        pairs = []
        for epoch_id, hashes in epochs:
            if hashes is None:
                pairs += [(epoch_id, key) for key in keys]
            elif epoch_id in filters:  # else deleted since it was listed
                pairs += [(epoch_id, keys[i]) for i in np.flatnonzero(probe.maybe_held(*filters[epoch_id])).tolist()]
        return pairs

    def _filters(self, session: Session, epoch_ids: list[int]) -> dict[int, tuple[bytes, int]]:
        with self._lock:
            found = {epoch_id: self._kept[epoch_id] for epoch_id in epoch_ids if epoch_id in self._kept}
            for epoch_id in found:
                self._kept.move_to_end(epoch_id)
        missing = [epoch_id for epoch_id in epoch_ids if epoch_id not in found]
        if missing:
            read = prediction_epoch_store.filters(session, missing)
            found.update(read)
            with self._lock:
                for epoch_id, entry in read.items():
                    if epoch_id not in self._kept and len(entry[0]) <= self.max_bytes:
                        self._kept[epoch_id] = entry
                        self._bytes += len(entry[0])
                while self._bytes > self.max_bytes:
                    _, (data, _) = self._kept.popitem(last=False)
                    self._bytes -= len(data)
        return found
