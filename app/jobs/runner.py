"""Background jobs: long work (fits, comparisons) recorded in the ``jobs`` table and run by an
engine, so that any API process answers a poll and a restart loses nothing queued.

States: ``queued`` → ``running`` → ``succeeded`` (with the result), ``failed`` (a problem
document) or ``cancelled``. A running job writes its step and percent done at each progress
point, where it also stops if it was cancelled, and a heartbeat (``updated_at``) every tenth of
the stale time; a running job whose heartbeat has been silent for the stale time (its process
died) is reported failed, "Worker lost", when it is read. Queued jobs are never lost.

Engines (``CALIBRATION_JOB_ENGINE``):

* ``EmbeddedEngine`` — a process pool of ``CALIBRATION_JOB_PROCESSES`` inside the API process
  (the one-command SQLite default). At start-up the queued jobs are offered to it again.
* ``ProcrastinateEngine`` — Procrastinate's queue in the same Postgres database (its tables come
  from our migrations); ``calibration-service worker`` processes on any machine take the jobs.

Either way the work is ``app.jobs.tasks.run_job(database_url, job_id)``; a job is claimed with a
conditional update, so offering it twice runs it once.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from datetime import timedelta

import orjson
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from ..platform import allocator
from ..platform.db import Database, libpq_url, normalise_url
from ..platform.errors import NotFound, Unavailable
from ..platform.logs import first_line
from ..platform.rows import utcnow
from ..platform.threads import limit_blas_threads
from . import store as job_store
from .status import JobStatus

PROGRESS_STEP = 5.0  # percent between progress writes
PROCRASTINATE_QUEUE = "calibration"
PROCRASTINATE_TASK = "calibration.run_job"
logger = logging.getLogger(__name__)


class JobCancelled(Exception):
    """Raised at a progress point of a job whose cancellation was requested."""


class JobProgress:
    """A running job's progress points: ``step(name, percent)`` and ``folds(done, total)`` write
    progress (every ``PROGRESS_STEP`` percent) and raise ``JobCancelled`` once a cancel was asked."""

    def __init__(self, db: Database, job_id: str, start: float = 0.0, end: float = 100.0):
        self.db = db
        self.job_id = job_id
        self.start, self.end = start, end
        self.reported = -PROGRESS_STEP
        #: ``auto_in_parts(calibrator)``: set where cross-validation fans out (``app.jobs.fan_out``)
        self.auto_in_parts = None

    def step(self, name: str, percent: float) -> None:
        with self.db.write() as session:
            if job_store.cancel_requested(session, self.job_id):
                raise JobCancelled
            job_store.update_job(session, self.job_id, step=name, percent=round(percent, 1))
        self.reported = percent

    def fitting(self, calibrator, n: int, k: int) -> None:
        """The fit's first step (5%); an ``auto`` fit then reports its cross-validation's fits
        between 5% and 80% (``calibrator.progress``, which ``auto`` passes to ``compare``), and runs
        it in parts where ``auto_in_parts`` is set."""
        self.step(f"fitting {calibrator.method} on {n}x{k}", 5.0)
        if calibrator.method == "auto":
            self.start, self.end = 5.0, 80.0
            calibrator.progress = self.folds
            if self.auto_in_parts is not None:
                self.auto_in_parts(calibrator)

    def finish_with(self, session, result: dict) -> None:
        """Record success in the caller's transaction; ``JobCancelled`` (which rolls it back)
        when the job is no longer running: cancelled, or declared lost meanwhile."""
        result = orjson.loads(orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY))  # datetimes as text
        if not job_store.finish(session, self.job_id, JobStatus.SUCCEEDED, result=result):
            raise JobCancelled

    def folds(self, done: int, total: int) -> None:
        percent = self.start + (self.end - self.start) * done / total
        if percent - self.reported >= PROGRESS_STEP and done < total:
            self.step(f"cross-validation: {done} of {total} fits", percent)


def job_view(row) -> dict:
    return {"id": row.id, "kind": row.kind, "status": row.status, "percent": row.percent, "step": row.step,
            "calibrator": row.calibrator, "worker": row.worker, "result": row.result, "error": row.error,
            "created_at": row.created_at, "started_at": row.started_at, "finished_at": row.finished_at,
            "updated_at": row.updated_at}


def engine_name(job_engine: str, database_url: str) -> str:
    """The engine ``CALIBRATION_JOB_ENGINE`` names; ``auto`` is Procrastinate on Postgres and the
    embedded process pool on SQLite."""
    if job_engine != "auto":
        return job_engine
    return "embedded" if normalise_url(database_url).get_backend_name() == "sqlite" else "procrastinate"


def _start_pool_process() -> None:
    """A pool process fixes glibc's malloc thresholds (``app.platform.allocator``: a job's freed arrays go
    back to the system) and exits when the API process that started it dies (it is re-parented),
    so its job's heartbeat stops with it instead of an orphan running on unseen. (Not
    ``PR_SET_PDEATHSIG``: that follows the thread that spawned the process, and pool processes
    are spawned from short-lived threads.)"""
    allocator.fix_thresholds()
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class EmbeddedEngine:
    """Jobs in a pool of processes of the API process (spawned: no threads or locks inherited).
    The pool is made by the first job offered to it, not at start-up: making one starts
    ``multiprocessing``'s resource tracker (a process, for the pool's queue locks), which a server
    that runs no job never needs (~0.05 CPU-s of every start, docs/benchmarks.md, "Process start-up")."""

    def __init__(self, task: Callable[[str, str, float], None], database_url: str, processes: int,
                 heartbeat_seconds: float, blas_threads: int = 1):
        limit_blas_threads(blas_threads)
        self.task = task
        self.database_url = database_url
        self.heartbeat_seconds = heartbeat_seconds
        self.processes = processes
        self.pool: ProcessPoolExecutor | None = None
        self.closed = False
        self.lock = threading.Lock()

    def enqueue(self, job_id: str) -> None:
        with self.lock:
            if self.closed:  # as a shut-down pool's submit: the runner withdraws the job
                raise RuntimeError("cannot schedule new futures after shutdown")
            if self.pool is None:
                self.pool = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"),
                                                initializer=_start_pool_process)
            pool = self.pool
        pool.submit(self.task, self.database_url, job_id, self.heartbeat_seconds)

    def shutdown(self) -> None:
        """Stop at once: running jobs are left to the heartbeat rule, queued ones stay queued and
        are offered again at the next start."""
        with self.lock:
            self.closed = True
            pool, self.pool = self.pool, None
        if pool is None:
            return
        processes = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()


class ProcrastinateEngine:
    """Jobs deferred to Procrastinate's Postgres queue, taken by ``calibration-service worker``.
    Its connection opens on the first job, so a process that runs none never connects."""

    def __init__(self, database_url: str):
        import procrastinate

        self.app = procrastinate.App(connector=procrastinate.SyncPsycopgConnector(conninfo=libpq_url(database_url)))
        self.lock = threading.Lock()
        self.opened = False

    def enqueue(self, job_id: str) -> None:
        with self.lock:
            if not self.opened:
                self.app.open()
                self.opened = True
        self.app.configure_task(PROCRASTINATE_TASK, queue=PROCRASTINATE_QUEUE).defer(job_id=job_id)

    def shutdown(self) -> None:
        with self.lock:
            if self.opened:
                self.app.close()
                self.opened = False


def procrastinate_workers(db: Database) -> int:
    """Procrastinate worker processes alive (a heartbeat in the last 30 s, its stalled-worker
    timeout), each running one job at a time."""
    with db.read() as session:
        return int(session.execute(text("SELECT count(*) FROM procrastinate_workers "
                                         "WHERE last_heartbeat > now() - interval '30 seconds'")).scalar_one())


class JobRunner:
    """Records jobs, hands them to an engine, and reads, lists and cancels them."""

    def __init__(self, db: Database, engine, stale_seconds: float = 300.0, queue_limit: int = 100):
        self.db = db
        self.engine = engine
        self.stale = timedelta(seconds=stale_seconds)
        self.queue_limit = queue_limit

    def submit(self, kind: str, calibrator: str | None, request: dict, payload: bytes | None) -> dict:
        """Record a queued job and hand it to the engine; ``Unavailable`` (503) past the limit, and
        where the engine refuses it (the queue's database away, a pool shut down): the job is then
        withdrawn, not left queued with nobody to run it, counting against the limit for ever."""
        job_id = uuid.uuid4().hex
        with self.db.write() as session:
            if job_store.count_active(session) >= self.queue_limit:
                raise Unavailable(f"{self.queue_limit} jobs are queued or running (CALIBRATION_JOB_QUEUE_LIMIT); "
                                "retry later", retry_after=30)
            job_store.create_job(session, job_id, kind, calibrator, request, payload)
        try:
            self.engine.enqueue(job_id)
        except Exception as exc:
            logger.warning("job %s could not be queued: %s", job_id, first_line(exc))
            with self.db.write() as session:
                job_store.withdraw(session, job_id)
            raise Unavailable("the job queue did not take the job (the server's log says why); retry later",
                              retry_after=30) from exc
        return self.get(job_id)

    def recover(self) -> None:
        """Offer the queued jobs to the engine again (after a restart); a database that is away
        or not migrated yet has none to offer (``/readyz`` says what is wrong)."""
        try:
            with self.db.read() as session:
                queued = job_store.queued_ids(session)
            for job_id in queued:
                self.engine.enqueue(job_id)
        except SQLAlchemyError as exc:
            logger.warning("queued jobs not offered again: %s", first_line(exc))

    def shutdown(self) -> None:
        self.engine.shutdown()

    def get(self, job_id: str) -> dict:
        """A job's state; a running job whose heartbeat is silent is failed first."""
        row = self._row(job_id)
        if row.status == JobStatus.RUNNING and row.updated_at < utcnow() - self.stale:
            lost = {"status": 503, "title": "Worker lost",
                    "detail": f"the process running this job stopped (no heartbeat for {self.stale}); "
                              "send the request again"}
            with self.db.write() as session:
                job_store.fail_if_silent(session, job_id, utcnow() - self.stale, lost)
            row = self._row(job_id)
        return job_view(row)

    def list(self, calibrator: str | None, status: str | None, limit: int) -> list[dict]:
        with self.db.read() as session:
            return [job_view(row) for row in job_store.list_jobs(session, calibrator, status, limit)]

    def cancel(self, job_id: str) -> dict:
        self._row(job_id)
        with self.db.write() as session:
            job_store.request_cancel(session, job_id)
        return self.get(job_id)

    def _row(self, job_id: str):
        with self.db.read() as session:
            row = job_store.get_job(session, job_id)
        if row is None:
            raise NotFound(f"no job {job_id!r} (finished jobs are kept for {job_store.RETENTION})")
        return row
