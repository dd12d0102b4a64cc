"""What a prediction id index costs a write as it grows, by the key it is ordered on: the evidence
for the next shape of the log's id index (``app/prediction_log/store.py``).

SQLite with this code's page size and pragmas (WAL, ``synchronous=NORMAL``), a ``WITHOUT ROWID``
table of id rows as ``logged_predictions`` has them, and ``--flushes`` commits of 4096 ids each
(a flush of 64 requests of 64 rows), inserted as the writer inserts them (one ``INSERT ... SELECT``
over ``json_each``). Ids are random (UUID-like, 32 hex digits) or in serving order, inserted as
served or sorted by key (``ORDER BY value, key``: the writer's statement since this compared them).
The keys:

* ``(calibrator, id)``: the index before migration 0011. Random ids land on random leaf pages; once the index
  has more leaf pages than a commit has ids, nearly every id dirties a page of its own, and in WAL
  mode each commit writes each dirty page whole (and the checkpoint again).
* ``(calibrator, epoch, id)``, a new epoch every ``--epoch-ids`` ids: a commit's inserts land in
  the open epoch's pages only, so a commit dirties at most that many pages, whatever the index's
  size: the index since migration 0011 (a lookup finds the epoch through its Bloom filter,
  ``app/prediction_log/epochs.py``).

Reported: microseconds of commit (wall) an id, in each quarter of the run, as the index grows.

Run: ``python benchmarks/id_index_keys.py [--flushes 320 --epoch-ids 65536]``.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.platform.db import SQLITE_PAGE_SIZE
from benchmarks._common import environment, write

IDS_PER_FLUSH = 4096


def ids_of(flush: int, ordered: bool) -> list[str]:
    if ordered:
        return [f"{1732000000 + flush:x}.{request}.{row}" for request in range(64) for row in range(64)]
    return [f"{random.getrandbits(128):032x}" for _ in range(IDS_PER_FLUSH)]


def commit_costs(epoch_ids: int | None, ordered: bool, flushes: int, key_order: bool = False) -> list[float]:
    """Microseconds of commit an id in each quarter of ``flushes`` commits; ``key_order``: the
    statement inserts its ids sorted (``ORDER BY value, key``), as the writer does since it was
    measured here, else in the order they were served."""
    with tempfile.TemporaryDirectory() as directory:
        connection = sqlite3.connect(f"{directory}/ids.db", isolation_level=None)
        connection.execute(f"PRAGMA page_size={SQLITE_PAGE_SIZE}")
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        key = "calibrator_id, prediction_id" if epoch_ids is None else "calibrator_id, epoch, prediction_id"
        connection.execute(
            "CREATE TABLE ids (calibrator_id INTEGER NOT NULL, epoch INTEGER NOT NULL, prediction_id VARCHAR(128) "
            "NOT NULL, chunk_id INTEGER NOT NULL, row INTEGER NOT NULL, labelled BOOLEAN NOT NULL, "
            f"PRIMARY KEY ({key})) WITHOUT ROWID")
        connection.execute("CREATE INDEX ix_ids_chunk_id ON ids (chunk_id)")
        order = "ORDER BY value, key " if key_order else ""
        insert = (f"INSERT INTO ids SELECT 1, ?, value, ?, key, 0 FROM json_each(?) WHERE true {order}"
                  "ON CONFLICT DO NOTHING")
        quarters = [0.0] * 4
        for flush in range(flushes):
            data = orjson.dumps(ids_of(flush, ordered)).decode()
            epoch = 0 if epoch_ids is None else flush * IDS_PER_FLUSH // epoch_ids
            start = time.perf_counter()
            connection.execute("BEGIN IMMEDIATE")
            connection.execute(insert, (epoch, flush, data))
            connection.execute("COMMIT")
            quarters[flush * 4 // flushes] += time.perf_counter() - start
        connection.close()
    per_quarter = flushes // 4 * IDS_PER_FLUSH
    return [1e6 * seconds / per_quarter for seconds in quarters]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--flushes", type=int, default=320)
    parser.add_argument("--epoch-ids", type=int, default=65536)
    args = parser.parse_args()
    rows = []
    for ordered in (False, True):
        for epoch_ids, key_order in ((None, False), (args.epoch_ids, False), (args.epoch_ids, True)):
            costs = commit_costs(epoch_ids, ordered, args.flushes, key_order)
            rows.append(["in serving order" if ordered else "random (UUID-like)",
                         "(calibrator, id)" if epoch_ids is None else f"(calibrator, epoch of {epoch_ids} ids, id)",
                         "sorted by key" if key_order else "as served",
                         *(f"{cost:.2f}" for cost in costs)])
            print(rows[-1], flush=True)
    total = args.flushes * IDS_PER_FLUSH
    write("id_index_keys", f"Commit time per id of an id index by its key: {args.flushes} commits of "
          f"{IDS_PER_FLUSH} ids (SQLite, {SQLITE_PAGE_SIZE}-byte pages, WAL)",
          ["ids", "key", "inserted", "us/id, 1st quarter", "2nd", "3rd", f"4th (to {total:,} ids)"], rows,
          environment([]), f"Load average {os.getloadavg()[0]:.1f} at the end.")


if __name__ == "__main__":
    main()
