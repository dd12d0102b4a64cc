"""``calibration-service worker``: processes that take jobs from Procrastinate's Postgres queue.

Fits are CPU-bound and hold the GIL between numpy calls, so concurrency is processes, not
threads: ``--concurrency N`` starts N processes (default: one per core), each a Procrastinate
worker running one job at a time. Workers on any number of machines share the queue through the
database. SIGTERM or SIGINT stops them: each finishes its current job (Procrastinate's graceful
shutdown, bounded by ``CALIBRATION_SHUTDOWN_SECONDS`` per process here) and exits.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys

from .jobs.runner import PROCRASTINATE_QUEUE, limit_blas_threads
from .platform import allocator
from .platform.db import normalise_url
from .settings import get_settings


def _run_one(name: str) -> None:
    from .wiring import procrastinate_app  # every job kind with its handler

    allocator.fix_thresholds()  # as the API's workers: freed arrays go back to the system
    app = procrastinate_app()
    app.run_worker(queues=[PROCRASTINATE_QUEUE], concurrency=1, name=name, install_signal_handlers=True,
                   shutdown_graceful_timeout=get_settings().worker_shutdown_seconds)


def run_workers(concurrency: int | None) -> int:
    """Start the worker processes and wait for them; returns the exit code."""
    settings = get_settings()
    if normalise_url(settings.database_url).get_backend_name() == "sqlite":
        print("error: workers take jobs from Postgres (DATABASE_URL=postgresql://...); with SQLite the API "
              "process runs jobs itself", file=sys.stderr)
        return 2
    count = concurrency or os.cpu_count() or 1
    limit_blas_threads(settings.job_blas_threads)
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_run_one, args=(f"worker-{os.getpid()}-{i}",), name=f"worker-{i}")
                 for i in range(count)]
    for process in processes:
        process.start()

    def forward(signum, _frame):
        for process in processes:
            if process.is_alive():
                os.kill(process.pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for process in processes:
        process.join()
    return max((p.exitcode or 0) for p in processes)
