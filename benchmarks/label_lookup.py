"""What epochs cost a label join: ``find_logged`` for 1000 ids (half of them logged, half never
seen) in an id index split into many closed epochs, each with its Bloom filter, against the same
ids in one epoch (the index as it was before migration 0011: one B-tree range per calibrator).

For each epoch count ``E``, a fresh SQLite database (and with ``--postgres`` one on the local
Postgres server) holds ``E x --epoch-ids`` random client ids
(UUID 4) of one calibrator, written as the log's writer writes them (one chunk a flush); then the
lookup runs ``--repeats`` times with the API process's filter cache warm (``EpochFilters``, what a
label request meets after the first) and once cold (each filter read from the database). Reported:
median milliseconds a lookup, and the ratio to one epoch of the same ids (median of the repeats).

Run: ``python benchmarks/label_lookup.py [--epoch-ids 4096 --epochs 1 16 64 256 --repeats 7 --postgres]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from sqlalchemy import insert

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.platform.db import Database
from app.platform.migrate import upgrade
from app.prediction_log import epoch_store as prediction_epoch_store
from app.prediction_log.epochs import EpochFilters
from app.prediction_log.lookup import find_logged
from app.prediction_log.store import log_predictions
from app.registry.rows import CalibratorRow
from benchmarks._common import environment, postgres_database, write

LOOKUP = 1000


def _filled(url: str, epochs: int, epoch_ids: int, close: bool, rng: np.random.Generator) -> list[str]:
    """Write ``epochs`` epochs of ``epoch_ids`` random ids (closed, or left open); the ids."""
    upgrade(url)
    db = Database(url)
    ids = [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(epochs * epoch_ids)]
    try:
        with db.write() as session:
            session.execute(insert(CalibratorRow), [{"name": "labels"}])
        epoch_id = None
        for start in range(0, len(ids), epoch_ids):
            with db.write() as session:
                if epoch_id is None or close:
                    epoch_id = prediction_epoch_store.open_epoch(session, 1)
                part = ids[start:start + epoch_ids]
                log_predictions(session, 1, 1, "logits", 2, np.zeros((len(part), 2), np.float32), part,
                                epoch_id=epoch_id)
                if close:
                    prediction_epoch_store.close(session, epoch_id)
    finally:
        db.dispose()
    return ids


@contextmanager
def _database(kind: str):
    if kind == "postgres":
        with postgres_database("bench_label_lookup") as url:
            yield url
        return
    with tempfile.TemporaryDirectory() as directory:
        yield f"sqlite:///{directory}/labels.db"


def _timed(url: str, wanted: list[str], filters: EpochFilters, repeats: int) -> tuple[float, int]:
    db = Database(url)
    try:
        times, found = [], 0
        for _ in range(repeats):
            start = time.perf_counter()
            with db.read() as session:
                found = len(find_logged(session, 1, wanted, filters))
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1000, found
    finally:
        db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epoch-ids", type=int, default=4096)
    parser.add_argument("--epochs", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--postgres", action="store_true", help="on the local Postgres server as well")
    args = parser.parse_args()
    rows = []
    for kind, epochs in [(kind, e) for kind in ("sqlite", "postgres")[:1 + args.postgres] for e in args.epochs]:
        timings = {}
        for close in (False, True):
            rng = np.random.default_rng(epochs)
            with _database(kind) as url:
                ids = _filled(url, epochs, args.epoch_ids, close, rng)
                picks = rng.choice(len(ids), LOOKUP // 2, replace=False)
                wanted = [ids[i] for i in picks] + [str(uuid.uuid4()) for _ in range(LOOKUP // 2)]
                cold, _ = _timed(url, wanted, EpochFilters(0), 1)
                warm_cache = EpochFilters()
                _timed(url, wanted, warm_cache, 1)
                warm, found = _timed(url, wanted, warm_cache, args.repeats)
                assert found == LOOKUP // 2, found
                timings[close] = (warm, cold)
        one, _ = timings[False]
        warm, cold = timings[True]
        rows.append([kind, f"{epochs * args.epoch_ids:,}", str(epochs), f"{one:.1f}", f"{warm:.1f}", f"{cold:.1f}",
                     f"{warm / one:.2f}"])
        print(rows[-1], flush=True)
    header = ["database", "ids in the index", "closed epochs", "ms, one epoch", "ms, closed epochs (filters cached)",
              "ms, closed epochs (filters read)", "cached / one epoch"]
    write("label_lookup", f"A label join of {LOOKUP} ids (half logged) over epochs of {args.epoch_ids} ids",
          header, rows, environment(["numpy", "sqlalchemy"]),
          f"Median of {args.repeats} lookups with the filters cached; one lookup with them read from the database.")


if __name__ == "__main__":
    main()
