"""Fresh Postgres databases for tests and benchmarks: ``create_postgres_database`` makes a uniquely
named one on the server at CALIBRATION_TEST_POSTGRES_URL (default the local one) and returns its URL
with a function that drops it. Postgres being unreachable fails the caller in CI (CI=true) and skips
it elsewhere (``postgres_unavailable``)."""

from __future__ import annotations

import os
import uuid

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

POSTGRES_ADMIN_URL = os.environ.get(
    "CALIBRATION_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def postgres_unavailable(reason: str):
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
        postgres_unavailable(str(exc).splitlines()[0])

    def drop():
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False), drop
