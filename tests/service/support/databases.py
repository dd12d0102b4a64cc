"""Fresh Postgres databases for tests and benchmarks: ``create_postgres_database`` makes a uniquely
named one on the server at CALIBRATION_TEST_POSTGRES_URL (default the local one) and returns its URL
with a function that drops it. Postgres being unreachable fails the caller in CI (CI=true) and skips
it elsewhere (``postgres_unavailable``). Databases migrated to head are copies of one migrated
template per test process (a SQLite file copied, ``CREATE DATABASE ... TEMPLATE`` on Postgres), the
same schema ``upgrade`` makes, without running every migration for every test.

On Postgres a copy costs the server far more than emptying one (``CREATE DATABASE`` writes every page
of the template through the WAL, ``DROP DATABASE`` forces a checkpoint; figures in
docs/benchmarks.md), so a test process keeps the copies its tests handed back
(``MigratedPostgres``): a copy whose schema is still the template's (``SCHEMA``, taken with no test
connected) is emptied as the template is (its other sessions ended, its non-empty tables truncated,
the template's rows and sequence positions put back) and renamed, so that the next test gets an
empty database under a name nobody has used; one whose schema a test changed (a downgrade) is
dropped. One admin connection per process makes and drops the databases."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import uuid
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url

from app.platform.db import libpq_url
from app.platform.migrate import upgrade

POSTGRES_ADMIN_URL = os.environ.get(
    "CALIBRATION_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def postgres_unavailable(reason: str):
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"PostgreSQL is required in CI and is unreachable: {reason}")
    pytest.skip(f"PostgreSQL unreachable: {reason}")


_admin: Engine | None = None


def admin_engine() -> Engine:
    """The process's engine on the admin database: one connection, kept, for every create and drop."""
    global _admin
    if _admin is None:
        _admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT", pool_size=1, max_overflow=2,
                               pool_pre_ping=True, connect_args={"connect_timeout": 3})
    return _admin


def admin_execute(statement: str) -> None:
    with admin_engine().connect() as connection:
        connection.execute(text(statement))


def database_url(name: str) -> str:
    return make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def new_name() -> str:
    return f"calibration_test_{uuid.uuid4().hex[:12]}"


def drop_postgres_database(name: str) -> None:
    admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def create_postgres_database() -> tuple[str, callable]:
    """A new uniquely named database on the Postgres server, and a function that drops it."""
    name = new_name()
    try:
        admin_execute(f'CREATE DATABASE "{name}"')
    except Exception as exc:
        postgres_unavailable(str(exc).splitlines()[0])
    return database_url(name), lambda: drop_postgres_database(name)


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


# the schema of the connected database, as one hash: every relation, column, default, constraint,
# index, trigger, rule, function and type outside the system schemas (by OID, so that a schema
# dropped and made again differs), the database's settings and the Alembic revision
SCHEMA = """
WITH spaces AS (SELECT oid FROM pg_namespace WHERE nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
                                              AND nspname NOT LIKE 'pg_temp%' AND nspname NOT LIKE 'pg_toast_temp%'),
     relations AS (SELECT oid FROM pg_class WHERE relnamespace IN (SELECT oid FROM spaces)),
     parts(part) AS (
       SELECT concat_ws(' ', 'n', oid, nspname) FROM pg_namespace WHERE oid IN (SELECT oid FROM spaces)
       UNION ALL SELECT concat_ws(' ', 'c', oid, relname, relkind, relnamespace, relrowsecurity, relacl::text)
                 FROM pg_class WHERE oid IN (SELECT oid FROM relations)
       UNION ALL SELECT concat_ws(' ', 'a', attrelid, attnum, attname, atttypid, atttypmod, attnotnull, attisdropped)
                 FROM pg_attribute WHERE attrelid IN (SELECT oid FROM relations)
       UNION ALL SELECT concat_ws(' ', 'd', oid, adrelid, adnum, md5(pg_get_expr(adbin, adrelid)))
                 FROM pg_attrdef WHERE adrelid IN (SELECT oid FROM relations)
       UNION ALL SELECT concat_ws(' ', 'k', oid, conname, conrelid, md5(pg_get_constraintdef(oid)))
                 FROM pg_constraint WHERE connamespace IN (SELECT oid FROM spaces)
       UNION ALL SELECT concat_ws(' ', 'i', indexrelid, indrelid, md5(pg_get_indexdef(indexrelid)))
                 FROM pg_index WHERE indrelid IN (SELECT oid FROM relations)
       UNION ALL SELECT concat_ws(' ', 't', oid, tgname, tgrelid, tgenabled, tgfoid)
                 FROM pg_trigger WHERE tgrelid IN (SELECT oid FROM relations)
       UNION ALL SELECT concat_ws(' ', 'r', oid, rulename, ev_class, md5(ev_action::text))
                 FROM pg_rewrite WHERE ev_class IN (SELECT oid FROM relations)
       UNION ALL SELECT concat_ws(' ', 'p', oid, proname, md5(prosrc), md5(coalesce(proconfig::text, '')))
                 FROM pg_proc WHERE pronamespace IN (SELECT oid FROM spaces)
       UNION ALL SELECT concat_ws(' ', 'y', oid, typname) FROM pg_type WHERE typnamespace IN (SELECT oid FROM spaces)
       UNION ALL SELECT concat_ws(' ', 'e', oid, extname, extversion) FROM pg_extension
       UNION ALL SELECT concat_ws(' ', 's', setrole, setconfig::text) FROM pg_db_role_setting
                 WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
     )
SELECT md5(string_agg(part, E'\\n' ORDER BY part)) FROM parts
"""
TABLES = """
SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
   AND n.nspname NOT LIKE 'pg_%' ORDER BY 1
"""
SEQUENCES = """
SELECT format('%I.%I', schemaname, sequencename), coalesce(last_value, start_value), last_value IS NOT NULL
  FROM pg_sequences WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1
"""


class MigratedPostgres:
    """Empty databases migrated to head for the tests of one process: copies of ``template_url``,
    handed back after each test and, where the test left the schema as it was, emptied and handed
    out again (module docstring)."""

    def __init__(self, template_url: str):
        self.template = make_url(template_url).database
        with psycopg.connect(libpq_url(template_url), autocommit=True) as connection:
            self.schema = connection.execute(SCHEMA).fetchone()[0]
            self.tables = [row[0] for row in connection.execute(TABLES)]
            self.sequences = connection.execute(SEQUENCES).fetchall()
            self.rows = {}  # the template's rows (the Alembic revision, the registry's generation)
            for table in self.tables:
                if connection.execute(f"SELECT EXISTS (SELECT FROM {table})").fetchone()[0]:
                    with connection.cursor().copy(f"COPY {table} TO STDOUT (FORMAT binary)") as copy:
                        self.rows[table] = b"".join(bytes(block) for block in copy)
        self.free: list[str] = []

    def take(self) -> str:
        """The URL of an empty migrated database that no other test is using."""
        if self.free:
            return database_url(self.free.pop())
        name = new_name()
        admin_execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        return database_url(name)

    def give_back(self, url: str) -> None:
        """Empty the database at ``url`` for the next test, or drop it where its schema changed."""
        name = make_url(url).database
        if not self._empty(url):
            drop_postgres_database(name)
            return
        fresh = new_name()
        admin_execute(f'ALTER DATABASE "{name}" RENAME TO "{fresh}"')
        self.free.append(fresh)

    def _empty(self, url: str) -> bool:
        """End the database's other sessions, then (its schema the template's) truncate the tables
        that hold rows and put the template's rows and sequence positions back; False where the
        schema differs."""
        with psycopg.connect(libpq_url(url), autocommit=True) as connection:
            connection.execute("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                               "WHERE datname = current_database() AND pid <> pg_backend_pid()")
            if connection.execute(SCHEMA).fetchone()[0] != self.schema:
                return False
            exists = " UNION ALL ".join(f"SELECT {index} FROM (SELECT FROM {table} LIMIT 1) AS t"
                                        for index, table in enumerate(self.tables))
            used = [self.tables[row[0]] for row in connection.execute(exists)]
            with connection.transaction():
                if used:
                    connection.execute(f"TRUNCATE {', '.join(used)} CASCADE")
                for table, rows in self.rows.items():
                    with connection.cursor().copy(f"COPY {table} FROM STDIN (FORMAT binary)") as copy:
                        copy.write(rows)
                if self.sequences:
                    connection.execute("SELECT " + ", ".join(
                        f"setval('{sequence}', {value}, {called})" for sequence, value, called in self.sequences))
        return True

    def close(self) -> None:
        for name in self.free:
            drop_postgres_database(name)
        self.free.clear()
