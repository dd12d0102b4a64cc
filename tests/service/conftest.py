"""The fixtures of every service test, in every folder (unit, api, live, migrations, fuzz): real
databases, a fresh SQLite file and a fresh Postgres database per test (``support/databases.py``,
dropped afterwards; Postgres unreachable fails the tests in CI and skips them elsewhere), migrated
or not, an in-process client of the app on each, and the browser fixtures of ``support/browser.py``."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from app.main import create_app
from app.platform.migrate import upgrade
from app.settings import Settings
from tests.service.support.browser import browser, shots  # noqa: F401  (fixtures for the browser tests)
from tests.service.support.databases import create_postgres_database
from tests.service.support.webhooks import receiver  # noqa: F401  (the webhook receiver fixture)


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'calibration.db'}"


@pytest.fixture
def postgres_url():
    url, drop = create_postgres_database()
    yield url
    drop()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request) -> str:
    """An empty database of each kind, not migrated (for tests of the migrations)."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request) -> str:
    """An empty database of each kind, migrated to head."""
    url = request.getfixturevalue(f"{request.param}_url")
    upgrade(url)
    return url


@pytest.fixture
def client(database_url):
    # jobs in the API process on both databases (the Procrastinate engine has its worker tests)
    app = create_app(Settings(database_url=database_url, max_body_bytes=4 * 1024 * 1024, job_engine="embedded"))
    with TestClient(app) as test_client:
        yield test_client
