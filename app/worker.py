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
import re
import signal
import sys

from .platform import allocator
from .platform.threads import limit_blas_threads
from .settings import get_settings

# the supervisor imports no more than it needs (not SQLAlchemy, numpy or the jobs): each worker process
# it spawns imports everything again for itself (~0.35 CPU-s a start, docs/benchmarks.md, "Process start-up")
SCHEME = re.compile(r"([\w+]+)://")  # a URL's dialect[+driver], as SQLAlchemy's make_url reads it


def _backend(database_url: str) -> str:
    """``normalise_url(database_url).get_backend_name()``, without SQLAlchemy's import where the URL
    is well formed (one that is not is left to SQLAlchemy, and its error)."""
    scheme = SCHEME.match(database_url)
    if scheme is None:
        from .platform.db import normalise_url

        return normalise_url(database_url).get_backend_name()
    backend = scheme.group(1).split("+")[0]
    return "postgresql" if backend == "postgres" else backend  # as normalise_url names it


def _run_one(name: str) -> None:
    from procrastinate.exceptions import ConnectorException
    from psycopg.errors import UndefinedFunction, UndefinedTable

    from .jobs.runner import PROCRASTINATE_QUEUE
    from .wiring import procrastinate_app  # every job kind with its handler

    allocator.fix_thresholds()  # as the API's workers: freed arrays go back to the system
    app = procrastinate_app()
    try:
        app.run_worker(queues=[PROCRASTINATE_QUEUE], concurrency=1, name=name, install_signal_handlers=True,
                       shutdown_graceful_timeout=get_settings().worker_shutdown_seconds)
    except ConnectorException as exc:
        if not isinstance(exc.__cause__, UndefinedFunction | UndefinedTable):
            raise
        print("error: the database has no job queue (Procrastinate's schema): run `calibration-service migrate` "
              f"first ({str(exc.__cause__).splitlines()[0]})", file=sys.stderr)
        sys.exit(2)


def run_workers(concurrency: int | None) -> int:
    """Start the worker processes and wait for them; returns the exit code."""
    settings = get_settings()
    if _backend(settings.database_url) == "sqlite":
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
