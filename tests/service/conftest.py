"""Real databases for the service tests: a fresh SQLite file and a fresh Postgres database per
test (created on the server at CALIBRATION_TEST_POSTGRES_URL, default the local one, and
dropped afterwards). Postgres being unreachable fails the tests in CI (CI=true) and skips them
elsewhere."""

from __future__ import annotations

import os
import uuid

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from starlette.testclient import TestClient

from app.main import create_app
from app.platform.migrate import upgrade
from app.settings import Settings
from tests.service.browser import browser, shots  # noqa: F401  (fixtures for the browser tests)

POSTGRES_ADMIN_URL = os.environ.get(
    "CALIBRATION_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def _postgres_unavailable(reason: str):
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"PostgreSQL is required in CI and is unreachable: {reason}")
    pytest.skip(f"PostgreSQL unreachable: {reason}")


def create_postgres_database() -> tuple[str, callable]:
    """A new uniquely named database on the Postgres server, and a function that drops it."""
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT",
                          connect_args={"connect_timeout": 3})
    name = f"calibration_test_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        admin.dispose()
        _postgres_unavailable(str(exc).splitlines()[0])

    def drop():
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False), drop


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
