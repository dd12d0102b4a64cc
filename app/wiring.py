"""The wiring: the one module that knows every domain. It builds every service from the settings (the
database, the job runner and its engine, the prediction log, the calibration service, the scheduler,
idempotency keys, API keys, the Prometheus collectors) and hands them with the domains' routers to the
HTTP edge (``app.http.application``). Importing it also imports every domain's ``tasks`` module, which
fills the job-kind -> handler registry (``app.jobs.handlers``): the job processes run ``run_job`` of this
module, and ``calibration-service worker`` its ``procrastinate_app``, so that every kind has its handler
in them too. The HTTP edge (``app.http``, every domain's ``routes``, FastAPI) is imported only where the
application is built (``edge``, ``create_app``): a job process imports the services and the handlers,
not a web framework it never serves with."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .access.idempotency import IdempotencyKeys
from .comparisons import tasks as comparison_tasks
from .conformal.service import ConformalService
from .jobs import tasks as job_tasks
from .jobs.metrics import JobCollector
from .jobs.runner import EmbeddedEngine, JobRunner, ProcrastinateEngine, engine_name
from .monitoring import tasks as monitoring_tasks
from .monitoring.metrics import QualityCollector
from .monitoring.webhooks import WebhookPolicy
from .platform import logs
from .platform.db import Database
from .prediction_log.caps import LogCapCollector
from .prediction_log.epochs import EpochFilters, EpochWriter
from .prediction_log.pipe import PipeWriter
from .prediction_log.service import PredictionLog
from .promotion import tasks as promotion_tasks
from .promotion.scheduler import Scheduler
from .registry import tasks as registry_tasks
from .registry.service import CalibrationService
from .settings import Settings, get_settings

if TYPE_CHECKING:
    from .http import application
    from .http.auth import KeyVerifier

#: the domains' job handlers, registered on import (``app.jobs.handlers``)
TASKS = (comparison_tasks, job_tasks, monitoring_tasks, promotion_tasks, registry_tasks)


def run_job(database_url: str, job_id: str, heartbeat_seconds: float | None = None) -> None:
    """Run one job (``app.jobs.tasks.run_job``) in a process where every kind has its handler."""
    job_tasks.run_job(database_url, job_id, heartbeat_seconds)


def procrastinate_app():
    """The Procrastinate app of ``calibration-service worker`` (``app.jobs.tasks.procrastinate_app``)."""
    return job_tasks.procrastinate_app()


def job_engine(settings: Settings):
    """The engine ``CALIBRATION_JOB_ENGINE`` names (``jobs.engine_name``)."""
    if engine_name(settings.job_engine, settings.database_url) == "procrastinate":
        return ProcrastinateEngine(settings.database_url)
    return EmbeddedEngine(run_job, settings.database_url, settings.job_processes, settings.job_stale_seconds / 10,
                          settings.job_blas_threads)


def integrity_key(settings: Settings) -> bytes | None:
    return settings.integrity_key.get_secret_value().encode() if settings.integrity_key else None


def log_writer_process(settings: Settings, database: Database) -> PipeWriter | None:
    """The prediction log's writer process (``app.prediction_log.pipe``), unless the settings ask for
    a thread, the database is SQLite in memory (another process would open an empty one) or the
    system is not Linux (the pipe's size and fill level are Linux's ``fcntl`` and ``ioctl``)."""
    url = database.engine.url
    in_memory = url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")
    if settings.log_writer == "thread" or in_memory or sys.platform != "linux":
        return None
    return PipeWriter({"database_url": settings.database_url, "db_timeout": settings.db_timeout_seconds,
                       "flush_rows": settings.log_flush_rows, "flush_bytes": settings.log_flush_bytes,
                       "flush_seconds": settings.log_flush_seconds,
                       "max_buffer_bytes": settings.log_buffer_bytes, "log_level": settings.log_level,
                       "cache_bytes": settings.log_writer_cache_bytes, "epoch_ids": settings.log_epoch_ids,
                       "epoch_digest_bytes": settings.log_epoch_digest_bytes,
                       "max_logged_rows": settings.max_logged_rows},
                      settings.log_ring_bytes, flush_timeout=2 * settings.db_timeout_seconds + 30)


@dataclass(frozen=True)
class Services:
    """Every long-lived service of one application, built from the settings."""

    database: Database
    jobs: JobRunner
    prediction_log: PredictionLog
    service: CalibrationService
    conformal: ConformalService
    scheduler: Scheduler
    idempotency: IdempotencyKeys
    keys: KeyVerifier | None

    def start(self) -> None:
        self.prediction_log.start()
        self.scheduler.start()

    def stop(self) -> None:
        self.scheduler.stop()
        self.prediction_log.stop()


def build(settings: Settings) -> Services:
    """The services of one application, from ``settings``."""
    from .http.auth import KeyVerifier

    database = Database(settings.database_url, settings.db_timeout_seconds)
    jobs = JobRunner(database, job_engine(settings), settings.job_stale_seconds, settings.job_queue_limit)
    prediction_log = PredictionLog(database, settings.log_flush_rows, settings.log_flush_seconds,
                                   settings.log_buffer_bytes, settings.observation_retention_days,
                                   settings.prediction_log_retention_days, settings.retention_interval_seconds,
                                   log_writer_process(settings, database),
                                   EpochWriter(settings.log_epoch_ids, settings.log_epoch_digest_bytes // 16),
                                   EpochFilters(settings.log_epoch_filter_bytes),
                                   settings.log_epoch_idle_seconds, settings.max_logged_rows, settings.log_flush_bytes)
    service = CalibrationService(database, settings.cache_size, settings.max_body_bytes, settings.device,
                                 jobs, settings.sync_budget_seconds, settings.cache_bytes,
                                 max_array_bytes=settings.max_array_bytes,
                                 max_json_bytes=settings.max_json_bytes, max_entries=settings.max_entries,
                                 max_parameters=settings.max_parameters,
                                 integrity_key=integrity_key(settings), prediction_log=prediction_log,
                                 observation_caps=(settings.max_observation_rows,
                                                   settings.max_observation_bytes,
                                                   settings.max_fit_entries),
                                 online_update_rows=settings.online_update_rows,
                                 max_read_entries=settings.max_read_entries)
    return Services(database, jobs, prediction_log, service,
                    ConformalService(database, service, integrity_key(settings), settings.cache_size),
                    Scheduler(service, settings.schedule_seconds, WebhookPolicy.of(settings)),
                    IdempotencyKeys(database, settings.idempotency_seconds, settings.idempotency_lease_seconds),
                    KeyVerifier(database, settings.api_key_cache_seconds) if settings.api_keys_enabled else None)


def edge(services: Services) -> application.Edge:
    """What the HTTP edge serves: the services' state, the collectors and every domain's router."""
    from .access import routes as keys
    from .comparisons import routes as evaluation
    from .conformal import routes as conformal_routes
    from .dashboard import routes as ui
    from .http import application, health
    from .monitoring import routes as quality_routes
    from .observations import routes as observations
    from .oip import routes as v2
    from .promotion import routes as promotion_routes
    from .registry import routes as calibrators

    return application.Edge(
        state={"db": services.database, "service": services.service,
               "conformal": services.conformal, "idempotency": services.idempotency,
               "keys": services.keys},
        collectors=[JobCollector(services.database), QualityCollector(services.database),
                    LogCapCollector(services.database)],
        routers=[calibrators.router, evaluation.router, conformal_routes.router, observations.router,
                 quality_routes.router, promotion_routes.router, health.router, keys.router, v2.router,
                 ui.router],  # the dashboard at /ui (HTML, not in the OpenAPI document)
        served_by=[calibrators.router, v2.router],
        docs_order=calibrators.DOCS_ORDER,
        recover=services.jobs.recover,
        start=services.start,
        stop=services.stop,
        close_jobs=services.jobs.shutdown,
        dispose=services.database.dispose,
    )


def create_app(settings: Settings | None = None) -> application.FastAPI:
    """The application: every service built from ``settings`` (default: the environment's), served by
    the HTTP edge."""
    from .http import application

    settings = settings or get_settings()
    logs.configure(settings.log_level)
    return application.create_app(settings, edge(build(settings)))
