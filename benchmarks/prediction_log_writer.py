"""The prediction log's writer alone: CPU per logged request, with no server, client or event loop.

A fresh SQLite database (migrated, so with this code's page size), one calibrator, and
``PredictionLog.record`` then ``flush`` called in one thread: ``--requests`` batches of 64 x
``--classes`` float32 rows, flushed every 64 requests (4096 rows: the default
``CALIBRATION_LOG_FLUSH_ROWS``). Reported per request: the thread's CPU time in ``record`` (the
hot path's share: sampling, ids, the copy into the buffer) and in ``flush`` (the writer's: the
chunk, its index rows, the commit), at sampling rates 10% and 100% with generated ids and at
100% with 64 client ids a request. Thread CPU time does not count what other processes take, so
these figures are steadier than the live benchmark's (``benchmarks/prediction_log.py``) on a
shared machine; that one is what the hot path pays.

Run: ``python benchmarks/prediction_log_writer.py [--requests 20000 --classes 100]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from sqlalchemy import insert

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.db import SQLITE_PAGE_SIZE, Database
from app.migrate import upgrade
from app.models import CalibratorRow
from app.prediction_log import PredictionLog
from app.store import ResolvedVersion
from benchmarks._common import environment, write

FLUSH_EVERY = 64  # requests: 4096 rows of 64


def measure(rate: float, client_ids: bool, requests: int, classes: int) -> dict:
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{directory}/log.db"
        upgrade(url)
        db = Database(url)
        with db.write() as session:
            created = session.execute(insert(CalibratorRow).returning(CalibratorRow.id), {"name": "bench"})
            calibrator = created.scalar_one()
        log = PredictionLog(db, flush_rows=1 << 40)
        resolved = ResolvedVersion("bench", 1, "-", 1, calibrator, rate)
        batch = np.random.default_rng(0).standard_normal((64, classes)).astype(np.float32)
        recording = writing = 0.0
        for i in range(requests):
            ids = [f"request-{i}-{j}" for j in range(64)] if client_ids else None
            start = time.thread_time()
            log.record(resolved, "logits", classes, batch, ids)
            recording += time.thread_time() - start
            if (i + 1) % FLUSH_EVERY == 0 or i == requests - 1:
                start = time.thread_time()
                log.flush()
                writing += time.thread_time() - start
        size = os.path.getsize(f"{directory}/log.db")
        db.dispose()
    return {"record_us": 1e6 * recording / requests, "flush_us": 1e6 * writing / requests, "mib": size / (1 << 20)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--classes", type=int, default=100)
    args = parser.parse_args()
    rows = []
    for label, rate, client_ids in (("10%", 0.1, False), ("100%", 1.0, False), ("100%, client ids", 1.0, True)):
        result = measure(rate, client_ids, args.requests, args.classes)
        rows.append([label, f"{result['record_us']:.1f}", f"{result['flush_us']:.1f}", f"{result['mib']:.0f}"])
    write("prediction_log_writer", f"The prediction log's writer alone: thread CPU per request of 64 x {args.classes} "
          f"float32 rows ({args.requests} requests, SQLite, {SQLITE_PAGE_SIZE}-byte pages)",
          ["logging", "record us/request (hot path)", "flush us/request (writer)", "database MiB"], rows,
          environment(["numpy", "sqlalchemy"]),
          f"Flushed every {FLUSH_EVERY} requests. Load average {os.getloadavg()[0]:.1f} at the end (thread CPU "
          "time does not count other processes' time, but shared caches and cores still move it a little).")


if __name__ == "__main__":
    main()
