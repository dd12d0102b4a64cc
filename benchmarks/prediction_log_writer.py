"""The prediction log's writer alone: CPU per logged request, with no server, client or event loop.

A fresh database (migrated: SQLite with this code's page size, and with ``--postgres`` a new
database on the local Postgres server beside it), one calibrator, and ``PredictionLog.record``
then ``flush`` called in one thread: ``--requests`` batches of 64 x ``--classes`` float32 rows,
flushed every 64 requests (4096 rows; the service's writer waits for 8 MiB of inputs,
``CALIBRATION_LOG_FLUSH_BYTES``: ~330 of these requests). Reported per
request: the thread's CPU time in ``record`` (the hot path's share: sampling, ids, the copy into
the buffer) and in ``flush`` (the writer's: the chunk, its index rows, the commit), and the wall
time of ``flush`` over the run's first and last quarters (what the writer can sustain as its id
index grows; Postgres's own processes work outside this thread, so only wall time compares the
two databases), at sampling rates 10% and 100% with generated ids and at 100% with 64 client ids
a request: ids that follow the order they are served in (``request-<i>-<j>``), or random ones
(UUID 4, what a service's request ids often are; made before the run). Thread CPU time does not
count what other processes take, so these figures are steadier than the live benchmark's
(``benchmarks/prediction_log.py``) on a shared machine; that one is what the hot path pays.

Run: ``python benchmarks/prediction_log_writer.py [--requests 20000 --classes 100 --postgres]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from sqlalchemy import create_engine, insert, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.platform.db import SQLITE_PAGE_SIZE, Database
from app.platform.migrate import upgrade
from app.prediction_log.service import PredictionLog
from app.registry.rows import CalibratorRow
from app.registry.store import ResolvedVersion
from benchmarks._common import environment, postgres_database, write

FLUSH_EVERY = 64  # requests: 4096 rows of 64
# (label, sampling rate, client ids: None (generated), "ordered" or "random", databases)
SETTINGS = (("10%", 0.1, None, ("sqlite",)), ("100%", 1.0, None, ("sqlite",)),
            ("100%, client ids in serving order", 1.0, "ordered", ("sqlite", "postgres")),
            ("100%, random client ids (UUID 4)", 1.0, "random", ("sqlite", "postgres")))


@contextmanager
def database(kind: str):
    """``(url, size in bytes of the database afterwards: a function)`` of a new, migrated database."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as directory:
            url = f"sqlite:///{directory}/log.db"
            upgrade(url)
            yield url, lambda: os.path.getsize(f"{directory}/log.db")
        return
    with postgres_database("bench_log_writer") as url:
        engine = create_engine(url)

        def size() -> int:
            with engine.connect() as connection:
                return connection.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
        try:
            upgrade(url)
            yield url, size
        finally:
            engine.dispose()


def request_ids(client_ids: str | None, requests: int) -> list[list[str] | None]:
    if client_ids is None:
        return [None] * requests
    if client_ids == "ordered":
        return [[f"request-{i}-{j}" for j in range(64)] for i in range(requests)]
    return [[str(uuid.uuid4()) for _ in range(64)] for _ in range(requests)]


def measure(kind: str, rate: float, client_ids: str | None, requests: int, classes: int) -> dict:
    all_ids = request_ids(client_ids, requests)
    quarter = requests // 4
    with database(kind) as (url, size):
        db = Database(url)
        with db.write() as session:
            created = session.execute(insert(CalibratorRow).returning(CalibratorRow.id), {"name": "bench"})
            calibrator = created.scalar_one()
        log = PredictionLog(db, flush_rows=1 << 40)
        resolved = ResolvedVersion("bench", 1, "-", 1, calibrator, rate)
        batch = np.random.default_rng(0).standard_normal((64, classes)).astype(np.float32)
        recording = writing = first_wall = last_wall = 0.0
        for i, ids in enumerate(all_ids):
            start = time.thread_time()
            log.record(resolved, "logits", classes, batch, ids)
            recording += time.thread_time() - start
            if (i + 1) % FLUSH_EVERY == 0 or i == requests - 1:
                start, wall = time.thread_time(), time.perf_counter()
                log.flush()
                writing += time.thread_time() - start
                wall = time.perf_counter() - wall
                first_wall += wall if i < quarter else 0.0
                last_wall += wall if i >= requests - quarter else 0.0
        db.dispose()
        mib = size() / (1 << 20)
    return {"record_us": 1e6 * recording / requests, "flush_us": 1e6 * writing / requests,
            "first_us": 1e6 * first_wall / quarter, "last_us": 1e6 * last_wall / quarter, "mib": mib}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--postgres", action="store_true", help="the client-id rows on Postgres as well")
    args = parser.parse_args()
    rows = []
    for label, rate, client_ids, kinds in SETTINGS:
        for kind in kinds if args.postgres else kinds[:1]:
            result = measure(kind, rate, client_ids, args.requests, args.classes)
            rows.append([label, kind, f"{result['record_us']:.1f}", f"{result['flush_us']:.1f}",
                         f"{result['first_us']:.0f}", f"{result['last_us']:.0f}", f"{result['mib']:.0f}"])
            print(rows[-1], flush=True)
    write("prediction_log_writer", f"The prediction log's writer alone: per request of 64 x {args.classes} "
          f"float32 rows ({args.requests} requests; SQLite with {SQLITE_PAGE_SIZE}-byte pages"
          f"{', and Postgres' if args.postgres else ''})",
          ["logging", "database", "record us/request (hot path, thread CPU)", "flush us/request (writer, thread CPU)",
           "flush wall us/request, first quarter", "flush wall us/request, last quarter", "database MiB"], rows,
          environment(["numpy", "sqlalchemy"]),
          f"Flushed every {FLUSH_EVERY} requests. Load average {os.getloadavg()[0]:.1f} at the end (thread CPU "
          "time does not count other processes' time, but shared caches and cores still move it a little).")


if __name__ == "__main__":
    main()
