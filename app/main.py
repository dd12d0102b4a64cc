"""The FastAPI application factory (``uvicorn app.main:create_app --factory``)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from . import logs, problems
from .db import Database
from .middleware import RequestMiddleware
from .routes import calibrators, evaluation, health
from .service import CalibrationService
from .settings import Settings, get_settings

try:
    __version__ = version("calibration-service")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

DESCRIPTION = """
Fit named calibrators on validation logits, serve calibrated probabilities and calibration
reports. Each fit creates an immutable **version** of a named calibrator; **aliases** (e.g.
`production`) point at versions. Call `name` (latest), `name@alias` or a pinned version.

Try it: `POST /v1/calibrators/demo/versions` with the example body, then
`POST /v1/calibrators/demo/calibrate` with its example. Errors are RFC 9457 problem details.
"""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    logs.configure(settings.log_level)
    database = Database(settings.database_url, settings.db_timeout_seconds)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        database.dispose()

    app = FastAPI(title="Calibration service", version=__version__, description=DESCRIPTION,
                  lifespan=lifespan)
    app.state.settings = settings
    app.state.db = database
    app.state.service = CalibrationService(database, settings.cache_size, settings.max_body_bytes)
    app.state.registry = CollectorRegistry()
    problems.install(app)
    app.include_router(calibrators.router)
    app.include_router(evaluation.router)
    app.include_router(health.router)
    app.add_middleware(RequestMiddleware, max_body_bytes=settings.max_body_bytes,
                       registry=app.state.registry)
    return app
