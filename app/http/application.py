"""The FastAPI application: the HTTP edge around the services that ``app.wiring`` builds from the
settings (error handlers, middleware, docs, the hot path, admission and the OpenAPI document), served
through ``app.main``. It knows no domain: the routers, the state the routes read and the work that
starts and stops with the application come in an ``Edge``."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.routing import APIRoute
from prometheus_client import CollectorRegistry

from ..platform.info import server_version
from ..settings import Settings, serve_threads
from . import admission, docs, hot_path, problems, shortcut
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
NO_TELEMETRY: dict[str, Any] = ({"telemetry": {"tracing": False, "metrics": False, "logs": False}}
                if "telemetry" in inspect.signature(FastAPI.__init__).parameters else {})


@dataclass(frozen=True)
class Edge:
    """What the wiring hands the HTTP edge. ``state``: the attributes of ``app.state`` the routes read
    (``db``, ``service``, ``idempotency``, ``keys``); ``routers`` in the order they are included (the
    OpenAPI document's order); ``served_by`` the routers whose ``/calibrate`` and ``/infer`` routes the
    shortcut serves; ``docs_order`` the tags' order in the document. At start-up ``recover`` runs off the
    loop, then ``start``; at shutdown ``stop`` runs off the loop, then ``close_jobs``, and once the pools
    are down, ``dispose``."""

    state: dict[str, Any]
    collectors: list[Any]
    routers: list[APIRouter]
    served_by: list[APIRouter]
    docs_order: Any
    recover: Callable[[], None]
    start: Callable[[], None]
    stop: Callable[[], None]
    close_jobs: Callable[[], None]
    dispose: Callable[[], None]


def create_app(settings: Settings, edge: Edge) -> FastAPI:
    """The application around ``edge`` (``app.wiring.create_app`` builds both from the settings)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await run_in_threadpool(edge.recover)
        edge.start()
        yield
        await run_in_threadpool(edge.stop)
        edge.close_jobs()
        work_pool.shutdown()
        hot_path_pool.shutdown(wait=False)
        edge.dispose()

    # /docs and /redoc from installed assets, not a CDN (app.http.docs)
    app = FastAPI(title="Calibration service", version=server_version(), description=DESCRIPTION,
                  lifespan=lifespan, docs_url=None, redoc_url=None, **NO_TELEMETRY)
    docs.install(app)
    app.state.settings = settings
    for name, value in edge.state.items():
        setattr(app.state, name, value)
    app.state.registry = CollectorRegistry()
    for collector in edge.collectors:
        app.state.registry.register(collector)
    problems.install(app)
    hot_path_pool = hot_path.install(app, serve_threads(settings))
    work_pool = admission.install(app, settings.work_threads, settings.work_queue)
    for router in edge.routers:
        app.include_router(router)
    document_common_errors(app, edge.docs_order)
    # the innermost user middleware, so added first (RequestMiddleware then wraps it)
    shortcut.install_shortcut(app, [route for router in edge.served_by for route in router.routes
                                    if isinstance(route, APIRoute) and route.path.endswith(("/calibrate", "/infer"))])
    app.add_middleware(RequestMiddleware, max_body_bytes=settings.max_body_bytes,
                       registry=app.state.registry, max_header_bytes=settings.max_header_bytes,
                       body_seconds=settings.body_seconds, hot_path=app.state.hot_path)
    return app
