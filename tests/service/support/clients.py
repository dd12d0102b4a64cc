"""An in-process client of the app on a database (the ``client`` fixture's, for tests that pick their
database themselves)."""

from __future__ import annotations

import contextlib

from starlette.testclient import TestClient

from app.main import create_app
from app.settings import Settings


@contextlib.contextmanager
def app_client(database_url: str):
    """An in-process client of the app on ``database_url``, jobs in the API process on both databases
    (the Procrastinate engine has its worker tests)."""
    app = create_app(Settings(database_url=database_url, max_body_bytes=4 * 1024 * 1024, job_engine="embedded"))
    with TestClient(app) as test_client:
        yield test_client
