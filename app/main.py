"""The ASGI entry point: ``uvicorn app.main:create_app --factory`` (what ``calibration-service
serve`` runs). The application is assembled in ``app.routes.application``, the HTTP edge."""

from .routes.application import create_app

__all__ = ["create_app"]
