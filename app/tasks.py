"""The work of a job, in whatever process runs it (the embedded pool, or a Procrastinate worker):
``run_job(database_url, job_id)`` claims the job, beats its heartbeat, runs the fit or
comparison through the service, and records the outcome. A job that is not queued (taken by
another process, cancelled) is left alone, so offering it twice runs it once."""

from __future__ import annotations

import logging
import os
import socket
import threading

from . import job_store, policies
from .db import Database
from .errors import ServiceError
from .job_inputs import batch_of_job
from .jobs import JobCancelled, JobProgress
from .schemas import CompareFields, FitFields
from .service import CalibrationService
from .settings import get_settings

logger = logging.getLogger(__name__)
INTERNAL_ERROR = {"status": 500, "title": "Internal Server Error", "detail": "the job failed unexpectedly"}


def _finish(db: Database, job_id: str, status: str, **values) -> None:
    with db.write() as session:
        job_store.finish(session, job_id, status, **values)


def _heartbeat(db: Database, job_id: str, every: float, done: threading.Event) -> None:
    while not done.wait(every):
        try:
            with db.write() as session:
                job_store.update_job(session, job_id)
        except Exception as exc:  # the database is away: try again at the next beat
            logger.warning("job %s heartbeat failed: %s", job_id, str(exc).splitlines()[0])


def run_job(database_url: str, job_id: str, heartbeat_seconds: float | None = None) -> None:
    """Claim and run one job to its end, beating its heartbeat every ``heartbeat_seconds``
    (default: a tenth of ``CALIBRATION_JOB_STALE_SECONDS``)."""
    settings = get_settings()
    heartbeat_seconds = heartbeat_seconds or settings.job_stale_seconds / 10
    db = Database(database_url, settings.db_timeout_seconds)
    try:
        with db.write() as session:
            if not job_store.claim(session, job_id, f"{socket.gethostname()}:{os.getpid()}"):
                return
        done = threading.Event()
        beating = threading.Thread(target=_heartbeat, args=(db, job_id, heartbeat_seconds, done),
                                   name=f"job-{job_id[:8]}-heartbeat", daemon=True)
        beating.start()
        try:
            _run_claimed(db, job_id)
        finally:
            done.set()
            beating.join()
    finally:
        db.dispose()


def _run_claimed(db: Database, job_id: str) -> None:
    with db.read() as session:
        kind, calibrator, request, payload = job_store.load_input(session, job_id)
    service = CalibrationService(db, cache_size=1, max_body_bytes=0)
    progress = JobProgress(db, job_id)
    try:
        if kind == "fit" and request.get("chunks"):  # a fit on stored observations
            fields = FitFields.model_validate(request["fields"])
            service.fit(calibrator, service.observations.load(fields, request["chunks"]), job=progress)
        elif kind == "fit":
            service.fit(calibrator, batch_of_job(request, payload, FitFields), job=progress)
        elif kind == "compare":
            result = service.comparisons.compare_as_job(batch_of_job(request, payload, CompareFields), progress)
            _finish(db, job_id, "succeeded", result=result)
        elif kind == "refit":  # a refit policy's job (issue #21): fit, evaluate, maybe promote
            _finish(db, job_id, "succeeded", result=policies.run_refit(service, calibrator, request, progress))
        else:
            raise ValueError(f"unknown job kind {kind!r}")
    except JobCancelled:
        _finish(db, job_id, "cancelled")
    except ServiceError as error:
        _finish(db, job_id, "failed", error=error.as_problem())
    except Exception:  # a bug: the job says so instead of staying "running" for ever
        logger.exception("job %s failed", job_id)
        _finish(db, job_id, "failed", error=INTERNAL_ERROR)


def procrastinate_app():
    """The Procrastinate app of ``calibration-service worker``: one task, ``run_job``."""
    import procrastinate

    from .db import libpq_url
    from .jobs import PROCRASTINATE_QUEUE, PROCRASTINATE_TASK

    database_url = get_settings().database_url
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=libpq_url(database_url)))

    @app.task(name=PROCRASTINATE_TASK, queue=PROCRASTINATE_QUEUE)
    def run(job_id: str) -> None:
        run_job(database_url, job_id)

    return app
