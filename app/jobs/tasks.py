"""The work of a job, in whatever process runs it (the embedded pool, or a Procrastinate worker):
``run_job(database_url, job_id)`` claims the job, beats its heartbeat, runs it through the handler
its kind registered (``app.jobs.handlers``; each domain's ``tasks`` module registers its kinds), and
records the outcome. A job that is not queued (taken by
another process, cancelled) is left alone, so offering it twice runs it once."""

from __future__ import annotations

import logging
import os
import socket
import threading

from ..comparisons.values import CompareSpec
from ..observations.chunks import refs_from_json
from ..platform.db import Database
from ..platform.errors import ServiceError
from ..platform.logs import first_line
from ..registry.service import CalibrationService
from ..registry.serving import FitSpec
from ..settings import get_settings
from ..wire.batches import validated
from . import fan_out
from . import store as job_store
from .handlers import JobContext, handler_of, job_handler
from .inputs import batch_of_job
from .runner import JobCancelled, JobProgress, ProcrastinateEngine, engine_name, procrastinate_workers
from .status import JobStatus

logger = logging.getLogger(__name__)
INTERNAL_ERROR = {"status": 500, "title": "Internal Server Error", "detail": "the job failed unexpectedly"}


def _finish(db: Database, job_id: str, status: JobStatus, **values) -> None:
    with db.write() as session:
        job_store.finish(session, job_id, status, **values)


def _heartbeat(db: Database, job_id: str, every: float, done: threading.Event) -> None:
    while not done.wait(every):
        try:
            with db.write() as session:
                job_store.update_job(session, job_id)
        except Exception as exc:  # the database is away: try again at the next beat
            logger.warning("job %s heartbeat failed: %s", job_id, first_line(exc))


_DATABASES: dict[tuple[int, str, float], Database] = {}
_DATABASES_LOCK = threading.Lock()


def job_database(database_url: str, timeout: float) -> Database:
    """The ``Database`` on ``database_url`` of this process's jobs: one per process, URL and
    timeout, made by the first job and kept, so each later job reuses its engines and pooled
    connections. Keyed by process id: a forked child makes its own, never using its parent's
    connections."""
    key = (os.getpid(), database_url, timeout)
    with _DATABASES_LOCK:
        db = _DATABASES.get(key)
        if db is None:
            db = _DATABASES[key] = Database(database_url, timeout)
        return db


def run_job(database_url: str, job_id: str, heartbeat_seconds: float | None = None) -> None:
    """Claim and run one job to its end, beating its heartbeat every ``heartbeat_seconds``
    (default: a tenth of ``CALIBRATION_JOB_STALE_SECONDS``), on the process's ``job_database``."""
    settings = get_settings()
    heartbeat_seconds = heartbeat_seconds or settings.job_stale_seconds / 10
    db = job_database(database_url, settings.db_timeout_seconds)
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


def _run_claimed(db: Database, job_id: str) -> None:
    with db.read() as session:
        kind, calibrator, request, payload = job_store.load_input(session, job_id)
    settings = get_settings()
    service = CalibrationService(db, cache_size=1, max_body_bytes=0,
                                 observation_caps=(settings.max_observation_rows, settings.max_observation_bytes,
                                                   settings.max_fit_entries),
                                 max_read_entries=settings.max_read_entries)
    progress = JobProgress(db, job_id)
    job = JobContext(db, job_id, kind, calibrator, request, payload, service, progress,
                     lambda: _fan_out(db, job_id, calibrator, progress))
    try:
        result = handler_of(kind)(job)
        if result is not None:
            _finish(db, job_id, JobStatus.SUCCEEDED, result=result)
    except JobCancelled:
        _finish(db, job_id, JobStatus.CANCELLED)
    except ServiceError as error:
        _finish(db, job_id, JobStatus.FAILED, error=error.as_problem())
    except Exception:  # a bug: the job says so instead of staying "running" for ever
        logger.exception("job %s failed", job_id)
        _finish(db, job_id, JobStatus.FAILED, error=INTERNAL_ERROR)


def fit_batch(service: CalibrationService, request: dict, payload: bytes | None, shared: bool = False):
    """The labelled batch of a fit job: its arrays, or the stored observations it names (``shared``:
    see ``Observations.load``)."""
    if request.get("chunks"):
        fields = FitSpec.from_dict(request["fields"])
        return service.observations.load(fields, refs_from_json(request["chunks"]), shared)
    return batch_of_job(request, payload, FitSpec.from_dict)


def _fan_out(db: Database, job_id: str, calibrator: str | None, progress: JobProgress):
    """How this job's cross-validation fans out (``fan_out(x, labels, methods, folds, seed, kind)``),
    or ``None``: by default only where other workers can take the parts (Procrastinate);
    ``CALIBRATION_JOB_FAN_OUT=on`` also in the embedded pool (the parent then runs every part)."""
    settings = get_settings()
    named = engine_name(settings.job_engine, settings.database_url)
    if settings.job_fan_out == "off" or (settings.job_fan_out == "auto" and named != "procrastinate"):
        return None
    parent = fan_out.Parent(db, job_id, calibrator, progress, f"{socket.gethostname()}:{os.getpid()}",
                            settings.job_stale_seconds)

    def run(x, labels, methods, folds: int, seed: int, kind: str):
        engine = ProcrastinateEngine(settings.database_url) if named == "procrastinate" else None
        try:
            workers = procrastinate_workers(db) if engine else 1
            shared, units = fan_out.plan(x, methods, folds, seed, kind, workers)
            return fan_out.compare_in_parts(parent, shared, units, x, labels,
                                            engine.enqueue if engine else (lambda _part: None))
        finally:
            if engine is not None:
                engine.shutdown()

    return run


_PARENT_ARRAYS: dict[str, tuple] = {}  # a worker's parts of one parent read its arrays once


def _parent_arrays(db: Database, service: CalibrationService, parent_id: str) -> tuple:
    """The validated input and labels of a fanned-out job (comparison or fit), as its parent has them."""
    if parent_id not in _PARENT_ARRAYS:
        with db.read() as session:
            kind, _, request, payload = job_store.load_input(session, parent_id)
        if kind == "fit":
            batch = fit_batch(service, request, payload, shared=True)
        else:
            batch = batch_of_job(request, payload, CompareSpec.from_dict)
        inputs, labels = validated(batch)
        _PARENT_ARRAYS.clear()
        _PARENT_ARRAYS[parent_id] = (getattr(inputs, inputs.source), labels)
    return _PARENT_ARRAYS[parent_id]


@job_handler(fan_out.PART)
def run_part(job: JobContext) -> None:
    """Some candidate x fold units of a fanned-out job; cancelled when its parent is no longer running."""
    db, job_id, request = job.db, job.job_id, job.request
    with db.read() as session:
        parent = job_store.get_job(session, request["parent"])
        running = parent is not None and parent.status == JobStatus.RUNNING
    if not running:
        _finish(db, job_id, JobStatus.CANCELLED)
        return
    x, labels = _parent_arrays(db, job.service, request["parent"])
    _finish(db, job_id, JobStatus.SUCCEEDED, result=fan_out.run_units(x, labels, request, job.progress.folds))


def procrastinate_app():
    """The Procrastinate app of ``calibration-service worker``: one task, ``run_job``."""
    import procrastinate

    from ..platform.db import libpq_url
    from .runner import PROCRASTINATE_QUEUE, PROCRASTINATE_TASK

    database_url = get_settings().database_url
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=libpq_url(database_url)))

    @app.task(name=PROCRASTINATE_TASK, queue=PROCRASTINATE_QUEUE)
    def run(job_id: str) -> None:
        run_job(database_url, job_id)

    return app
