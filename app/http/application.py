"""The FastAPI application: settings, database, service, routers, error handlers, middleware
and the OpenAPI document, put together (served through ``app.main``)."""

from __future__ import annotations

import inspect
import sys
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from prometheus_client import CollectorRegistry

from ..access import routes as keys
from ..access.idempotency import IdempotencyKeys
from ..comparisons import routes as evaluation
from ..conformal import routes as conformal_routes
from ..conformal.service import ConformalService
from ..dashboard import routes as ui
from ..jobs.metrics import JobCollector
from ..jobs.runner import EmbeddedEngine, JobRunner, ProcrastinateEngine, engine_name
from ..jobs.tasks import run_job
from ..monitoring import routes as quality_routes
from ..monitoring.alarms import QualityCollector
from ..monitoring.webhooks import WebhookPolicy
from ..observations import routes as observations
from ..oip import routes as v2
from ..platform import logs
from ..platform.db import Database
from ..platform.info import server_version
from ..prediction_log.caps import LogCapCollector
from ..prediction_log.epochs import EpochFilters, EpochWriter
from ..prediction_log.pipe import PipeWriter
from ..prediction_log.service import PredictionLog
from ..promotion import routes as promotion_routes
from ..promotion.scheduler import Scheduler
from ..registry import routes as calibrators
from ..registry.service import CalibrationService
from ..settings import Settings, get_settings, serve_threads
from . import admission, docs, health, hot_path, problems, shortcut
from .auth import KeyVerifier
from .middleware import RequestMiddleware
from .openapi import document_common_errors

DESCRIPTION = """
Fit named calibrators on validation logits, serve calibrated probabilities and calibration
reports. Each fit creates an immutable **version** of a named calibrator; **aliases** (e.g.
`production`) point at versions. Call `name` (latest), `name@alias` or a pinned version.

Try it: `POST /v1/calibrators/demo/versions` with the example body, then
`POST /v1/calibrators/demo/calibrate` with its example. Errors are RFC 9457 problem details.
The same calibrators answer the Open Inference Protocol under `/v2` (KServe v2 / Triton),
binary tensor extension included.
"""


# FastAPI's built-in OpenTelemetry (recent releases) asks the global providers on every request;
# the service exports Prometheus metrics (/metrics) instead
NO_TELEMETRY = ({"telemetry": {"tracing": False, "metrics": False, "logs": False}}
                if "telemetry" in inspect.signature(FastAPI.__init__).parameters else {})


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
                       "flush_rows": settings.log_flush_rows, "flush_seconds": settings.log_flush_seconds,
                       "max_buffer_bytes": settings.log_buffer_bytes, "log_level": settings.log_level,
                       "cache_bytes": settings.log_writer_cache_bytes, "epoch_ids": settings.log_epoch_ids,
                       "max_logged_rows": settings.max_logged_rows},
                      settings.log_ring_bytes, flush_timeout=2 * settings.db_timeout_seconds + 30)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    logs.configure(settings.log_level)
    database = Database(settings.database_url, settings.db_timeout_seconds)

    jobs = JobRunner(database, job_engine(settings), settings.job_stale_seconds, settings.job_queue_limit)

    prediction_log = PredictionLog(database, settings.log_flush_rows, settings.log_flush_seconds,
                                   settings.log_buffer_bytes, settings.observation_retention_days,
                                   settings.prediction_log_retention_days, settings.retention_interval_seconds,
                                   log_writer_process(settings, database),
                                   EpochWriter(settings.log_epoch_ids), EpochFilters(settings.log_epoch_filter_bytes),
                                   settings.log_epoch_idle_seconds, settings.max_logged_rows)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await run_in_threadpool(jobs.recover)
        prediction_log.start()
        scheduler.start()
        yield
        await run_in_threadpool(scheduler.stop)
        await run_in_threadpool(prediction_log.stop)
        jobs.shutdown()
        work_pool.shutdown()
        hot_path_pool.shutdown(wait=False)
        database.dispose()

    # /docs and /redoc from installed assets, not a CDN (app.http.docs)
    app = FastAPI(title="Calibration service", version=server_version(), description=DESCRIPTION,
                  lifespan=lifespan, docs_url=None, redoc_url=None, **NO_TELEMETRY)
    docs.install(app)
    app.state.settings = settings
    app.state.db = database
    app.state.service = CalibrationService(database, settings.cache_size, settings.max_body_bytes, settings.device,
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
    app.state.conformal = ConformalService(database, app.state.service, integrity_key(settings), settings.cache_size)
    scheduler = Scheduler(app.state.service, settings.schedule_seconds, WebhookPolicy.of(settings))
    app.state.idempotency = IdempotencyKeys(database, settings.idempotency_seconds,
                                            settings.idempotency_lease_seconds)
    app.state.keys = KeyVerifier(database, settings.api_key_cache_seconds) if settings.api_keys_enabled else None
    app.state.registry = CollectorRegistry()
    app.state.registry.register(JobCollector(database))
    app.state.registry.register(QualityCollector(database))
    app.state.registry.register(LogCapCollector(database))
    problems.install(app)
    hot_path_pool = hot_path.install(app, serve_threads(settings))
    work_pool = admission.install(app, settings.work_threads, settings.work_queue)
    app.include_router(calibrators.router)
    app.include_router(evaluation.router)
    app.include_router(conformal_routes.router)
    app.include_router(observations.router)
    app.include_router(quality_routes.router)
    app.include_router(promotion_routes.router)
    app.include_router(health.router)
    app.include_router(keys.router)
    app.include_router(v2.router)
    app.include_router(ui.router)  # the dashboard at /ui (HTML, not in the OpenAPI document)
    document_common_errors(app, calibrators.DOCS_ORDER)
    shortcut.install_shortcut(app, [route for router in (calibrators.router, v2.router) for route in router.routes
                                    if route.path.endswith(("/calibrate", "/infer"))])
    app.add_middleware(RequestMiddleware, max_body_bytes=settings.max_body_bytes,
                       registry=app.state.registry, max_header_bytes=settings.max_header_bytes,
                       body_seconds=settings.body_seconds)
    return app
