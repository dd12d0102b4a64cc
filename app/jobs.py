"""Background jobs: long work (today, comparisons) run off the request on a small thread pool,
with their state in the database (``job_store``) so that any worker answers a poll.

States: ``running`` → ``succeeded`` (with the result) or ``failed`` (with a problem document).
A running job writes its percent done every ``PROGRESS_STEP`` percent and a heartbeat
(``updated_at``) every tenth of the stale time; a running job whose heartbeat has been silent
for the stale time (its process died) is reported failed, "Worker lost", when it is read.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from . import job_store
from .db import Database
from .errors import NotFound, ServiceError
from .models import utcnow

PROGRESS_STEP = 5.0  # percent between progress writes
WORKERS = 2
logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]


class JobRunner:
    """Runs job functions ``work(progress) -> result`` in the background and reads job states."""

    def __init__(self, db: Database, stale_seconds: float = 300.0):
        self.db = db
        self.stale = timedelta(seconds=stale_seconds)
        self.executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="job")

    def submit(self, kind: str, work: Callable[[Progress], dict]) -> dict:
        """Record a running job of ``kind``, start ``work`` and return the job's state."""
        job_id = uuid.uuid4().hex
        with self.db.write() as session:
            job_store.create_job(session, job_id, kind)
        self.executor.submit(self._run, job_id, work)
        return self.get(job_id)

    def shutdown(self) -> None:
        """Stop taking jobs; a job still running stays ``running`` in the database until its
        heartbeat goes silent."""
        self.executor.shutdown(wait=False, cancel_futures=True)

    def _update(self, job_id: str, **values) -> None:
        with self.db.write() as session:
            job_store.update_job(session, job_id, **values)

    def _run(self, job_id: str, work: Callable[[Progress], dict]) -> None:
        done = threading.Event()

        def heartbeat() -> None:
            while not done.wait(self.stale.total_seconds() / 10):
                try:
                    self._update(job_id)
                except Exception as exc:  # the database is away: try again at the next beat
                    logger.warning("job %s heartbeat failed: %s", job_id, str(exc).splitlines()[0])

        beating = threading.Thread(target=heartbeat, name=f"job-{job_id[:8]}-heartbeat", daemon=True)
        beating.start()
        try:
            self._run_to_end(job_id, work)
        finally:
            done.set()
            beating.join()

    def _run_to_end(self, job_id: str, work: Callable[[Progress], dict]) -> None:
        reported = [0.0]

        def progress(done: int, total: int) -> None:
            percent = round(100.0 * done / total, 1)
            if percent - reported[0] >= PROGRESS_STEP and done < total:
                reported[0] = percent
                self._update(job_id, percent=percent)

        try:
            result = work(progress)
        except ServiceError as error:
            self._update(job_id, status="failed", error=error.as_problem())
        except Exception:  # a bug: the job says so instead of staying "running" for ever
            logger.exception("job %s failed", job_id)
            self._update(job_id, status="failed", error={"status": 500, "title": "Internal Server Error",
                                                         "detail": "the job failed unexpectedly"})
        else:
            self._update(job_id, status="succeeded", percent=100.0, result=result)

    def get(self, job_id: str) -> dict:
        """A job's state; a running job whose heartbeat is silent is failed first."""
        row = self._row(job_id)
        if row.status == "running" and row.updated_at < utcnow() - self.stale:
            lost = {"status": 503, "title": "Worker lost",
                    "detail": f"the process running this job stopped (no heartbeat for {self.stale}); "
                              "send the request again"}
            with self.db.write() as session:
                job_store.fail_if_silent(session, job_id, utcnow() - self.stale, lost)
            row = self._row(job_id)
        return {"id": row.id, "kind": row.kind, "status": row.status, "percent": row.percent,
                "result": row.result, "error": row.error, "created_at": row.created_at,
                "updated_at": row.updated_at}

    def _row(self, job_id: str):
        with self.db.read() as session:
            row = job_store.get_job(session, job_id)
        if row is None:
            raise NotFound(f"no job {job_id!r} (finished jobs are kept for {job_store.RETENTION})")
        return row
