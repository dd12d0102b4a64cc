"""The fixtures of every service test, in every folder (unit, api, live, migrations, fuzz): real
databases, a fresh SQLite file and an empty Postgres database per test (``support/databases.py``:
a new one, dropped afterwards, or a migrated copy emptied afterwards for the process's next test;
Postgres unreachable fails the tests in CI and skips them elsewhere), migrated or not, an in-process
client of the app on each, and the browser fixtures of ``support/browser.py``."""

from __future__ import annotations

import pytest

from app.platform.migrate import upgrade
from tests.service.support.browser import browser, shots  # noqa: F401  (fixtures for the browser tests)
from tests.service.support.clients import app_client
from tests.service.support.databases import (
    MigratedPostgres,
    copy_sqlite_database,
    create_postgres_database,
    migrated_sqlite_template,
)
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


@pytest.fixture(scope="session")
def sqlite_head(tmp_path_factory):
    """A SQLite file migrated to head, once per test process (copied for each test)."""
    return migrated_sqlite_template(tmp_path_factory.mktemp("head"))


@pytest.fixture(scope="session")
def postgres_head():
    """A Postgres database migrated to head, once per test process (the template of each test's)."""
    url, drop = create_postgres_database()
    upgrade(url)
    yield url
    drop()


@pytest.fixture(scope="session")
def migrated_postgres(postgres_head):
    """The process's copies of ``postgres_head``, emptied between tests (``MigratedPostgres``)."""
    databases = MigratedPostgres(postgres_head)
    yield databases
    databases.close()


@pytest.fixture
def migrated_sqlite_url(sqlite_head, tmp_path) -> str:
    return copy_sqlite_database(sqlite_head, tmp_path / "calibration.db")


@pytest.fixture
def migrated_postgres_url(migrated_postgres):
    url = migrated_postgres.take()
    yield url
    migrated_postgres.give_back(url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request) -> str:
    """An empty database of each kind, migrated to head (a copy of a migrated template)."""
    return request.getfixturevalue(f"migrated_{request.param}_url")


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def module_database_url(request, tmp_path_factory):
    """An empty database of each kind migrated to head for one module's tests (the live server they
    share): a copy of the process's SQLite template, or a Postgres copy emptied afterwards for the
    process's next test. A fixture using it is torn down first, so its server has stopped by then."""
    if request.param == "sqlite":
        yield copy_sqlite_database(request.getfixturevalue("sqlite_head"),
                                   tmp_path_factory.mktemp("module") / "calibration.db")
        return
    databases = request.getfixturevalue("migrated_postgres")
    url = databases.take()
    yield url
    databases.give_back(url)


@pytest.fixture
def client(database_url):
    with app_client(database_url) as test_client:
        yield test_client
