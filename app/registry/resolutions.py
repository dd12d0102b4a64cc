"""Which version a reference means (``name``, ``name@alias``, a pinned version, ``/v2``'s default),
remembered while the database has not changed.

**The rule.** An answer of ``store.resolve`` is kept with the database's change counter
(``Database.data_version``) read *before* the lookup, and reused only while the counter still reads
the same. Any commit by any connection of any process (a fit, an alias move, a deleted version, a
changed log rate or ``/v2`` default: every replica or worker sharing the SQLite file) changes the
counter, so the next call looks the reference up again: there is no staleness window, and a deleted
version is never served from here. A commit between the counter's read and the lookup is seen at the
next call (the counter has moved), never hidden under an old counter.

Where the database gives no such counter (Postgres, an in-memory SQLite database) every call looks
the reference up, as before. At most ``size`` references are kept; past that, all are forgotten at
once (the next calls look them up again). Failed lookups (404s) are not kept.
"""

from __future__ import annotations

from ..platform.db import Database
from . import store
from .names import Reference
from .store import ResolvedVersion

DEFAULT_SIZE = 4096


class Resolutions:
    """``reference -> ResolvedVersion``, valid while ``db.data_version()`` is unchanged."""

    def __init__(self, db: Database, size: int = DEFAULT_SIZE):
        self.db = db
        self.size = size
        self._items: dict[Reference, tuple[int, ResolvedVersion]] = {}

    def resolve(self, reference: Reference) -> ResolvedVersion:
        counter = self.db.data_version()
        if counter is None:
            return store.resolve(self.db, reference)
        kept = self._items.get(reference)
        if kept is not None and kept[0] == counter:
            return kept[1]
        resolved = store.resolve(self.db, reference)
        if len(self._items) >= self.size:
            self._items.clear()
        self._items[reference] = (counter, resolved)
        return resolved
