"""The ASGI entry points. ``create_app`` is the application, its services built by ``app.wiring``
and served by ``app.http.application`` (the HTTP edge), with glibc's allocator thresholds fixed for the
process (``app.platform.allocator``). ``create_served_app`` is what ``calibration-service serve`` runs in
each worker process (``uvicorn app.main:create_served_app --factory``): the same application,
whose start-up ends by moving every object it leaves alive out of the cyclic collector's
generations (``gc.freeze``), so a full collection no longer walks the application's long-lived
objects (the prediction log's writer makes those collections frequent; figures in docs/benchmarks.md,
"Frozen start-up objects"). The cyclic collector is off from the factory's call to that freeze (and,
with one worker, from the start of ``serve``, imports included): the start-up's own collections walk
the objects it is building, which are kept, and the collection before the freeze frees what it left.
Tests build many applications in one process and
use ``create_app``: frozen objects are never collected, so each would leave its application behind.
"""

import gc
from contextlib import asynccontextmanager

from . import wiring
from .platform import allocator
from .settings import Settings


def create_app(settings: Settings | None = None):
    allocator.fix_thresholds()
    return wiring.create_app(settings)


def create_served_app(settings: Settings | None = None):
    gc.disable()  # until the freeze (see the module)
    app = create_app(settings)
    started = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app):
        async with started(app) as state:
            gc.collect()
            gc.freeze()
            gc.enable()
            yield state

    app.router.lifespan_context = lifespan
    return app


__all__ = ["create_app", "create_served_app"]
