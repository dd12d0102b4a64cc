"""Fresh Postgres databases for tests and benchmarks: ``create_postgres_database`` makes a uniquely
named one on the server at CALIBRATION_TEST_POSTGRES_URL (default the local one) and returns its URL
with a function that drops it. Postgres being unreachable fails the caller in CI (CI=true) and skips
it elsewhere (``postgres_unavailable``). Databases migrated to head are copies of one migrated
template per test process (a SQLite file copied, ``CREATE DATABASE ... TEMPLATE`` on Postgres), the
same schema ``upgrade`` makes, without running every migration for every test."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.platform.migrate import upgrade

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


def migrated_sqlite_template(directory: Path) -> Path:
    """A SQLite file in ``directory`` migrated to head, its WAL checkpointed into the file (so that a
    plain copy of the file is the whole database)."""
    path = directory / "head.db"
    upgrade(f"sqlite:///{path}")
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


def copy_sqlite_database(template: Path, path: Path) -> str:
    """A copy of the migrated ``template`` at ``path``: the database ``upgrade`` would have made there."""
    shutil.copyfile(template, path)
    return f"sqlite:///{path}"


def create_postgres_database_from(template_url: str) -> tuple[str, callable]:
    """A new uniquely named Postgres database made by ``CREATE DATABASE ... TEMPLATE``: a copy of the
    database at ``template_url`` (which nobody may be connected to), and a function that drops it."""
    template = make_url(template_url).database
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT",
                          connect_args={"connect_timeout": 3})
    name = f"calibration_test_{uuid.uuid4().hex[:12]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))

    def drop():
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False), drop
