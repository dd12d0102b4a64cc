"""The ASGI entry point: ``uvicorn app.main:create_app --factory`` (what ``calibration-service
serve`` runs), in each worker process: glibc's allocator thresholds fixed (``app.allocator``),
then the application, assembled in ``app.routes.application``, the HTTP edge."""

from . import allocator
from .routes import application
from .settings import Settings


def create_app(settings: Settings | None = None):
    allocator.fix_thresholds()
    return application.create_app(settings)


__all__ = ["create_app"]
