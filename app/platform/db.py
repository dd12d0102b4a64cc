"""Database engines: SQLite (WAL, busy timeout, immediate write transactions) or Postgres.

Writes go through ``Database.write()``: on SQLite it opens the transaction with
``BEGIN IMMEDIATE`` so concurrent writers queue on the busy timeout instead of failing with
"database is locked" when a read transaction tries to upgrade; on Postgres the statements
themselves take the row locks they need.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any, cast

from sqlalchemy import Select, create_engine, event
from sqlalchemy.engine import URL, CursorResult, Engine, Result, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker


def normalise_url(url: str) -> URL:
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def libpq_url(url: str) -> str:
    """A Postgres URL as libpq (psycopg) reads it, without SQLAlchemy's driver name."""
    return normalise_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def rows_matched(result: Result) -> int:
    """The rows an UPDATE or DELETE matched: its result is a ``CursorResult`` (``rowcount``), which
    ``Session.execute``'s type, the plain ``Result`` whatever the statement, does not say."""
    return cast(CursorResult, result).rowcount


SQLITE_PAGE_SIZE = 16384
GENERATION = "SELECT generation FROM registry_generation WHERE id = 1"  # Postgres's data_version


def make_engine(url: str, timeout: float = 30.0, pre_ping: bool = True, sqlite_cache_bytes: int = 0) -> Engine:
    """An engine for ``url``; on Postgres, ``pre_ping`` tests each pooled connection with a round
    trip before handing it out (SQLite has no server to lose). On SQLite, ``sqlite_cache_bytes``
    (when above 0) is each connection's page cache instead of SQLite's default (2 MiB)."""
    parsed = normalise_url(url)
    if parsed.get_backend_name() == "sqlite":
        # a pool as large as the thread pool that uses it: opening SQLite connections (and
        # setting their pragmas) on every request under load costs more than the query
        in_memory = parsed.database in (None, "", ":memory:")
        pool = {} if in_memory else {"pool_size": 20, "max_overflow": 40}
        engine = create_engine(parsed, connect_args={"timeout": timeout, "check_same_thread": False}, **pool)

        @event.listens_for(engine, "connect")
        def _configure(dbapi_connection, _record):
            dbapi_connection.isolation_level = None  # transactions are begun explicitly below
            cursor = dbapi_connection.cursor()
            # a new database's page size (an existing one keeps its own): the prediction log's
            # chunks are blobs of megabytes, and SQLite's CPU per byte written falls by half from
            # 4 KiB to 16 KiB pages (overflow pages and WAL frames; benchmarks/prediction_log.py)
            cursor.execute(f"PRAGMA page_size={SQLITE_PAGE_SIZE}")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA synchronous=NORMAL")
            if sqlite_cache_bytes > 0:  # a negative cache_size is KiB
                cursor.execute(f"PRAGMA cache_size={-max(1, sqlite_cache_bytes // 1024)}")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _begin(connection):
            connection.exec_driver_sql(f"BEGIN {connection.get_execution_options().get('sqlite_begin', 'DEFERRED')}")

        return engine
    return create_engine(
        parsed,
        pool_pre_ping=pre_ping,
        pool_size=10,
        max_overflow=20,
        connect_args={"connect_timeout": max(1, int(timeout))},
    )


def changed_rows(result: Result) -> int:
    """The rows an UPDATE or DELETE matched: ``Session.execute`` returns a ``CursorResult`` (which
    has ``rowcount``) for such a statement, typed as the plain ``Result`` it extends."""
    return cast(CursorResult, result).rowcount


class Database:
    """An engine with a read session factory and a write session factory, and (on Postgres) a
    second pool for the hot path's single-statement lookups (see ``first_row``)."""

    def __init__(self, url: str, timeout: float = 30.0, sqlite_cache_bytes: int = 0):
        self.url = url
        self.engine = make_engine(url, timeout, sqlite_cache_bytes=sqlite_cache_bytes)
        writer = lookups = self.engine
        if self.engine.dialect.name == "sqlite":
            writer = self.engine.execution_options(sqlite_begin="IMMEDIATE")
        else:
            # the hot path's lookups get their own pool without the pre-ping, which would double
            # their round trips; ``first_row`` retries a connection the server dropped instead
            lookups = make_engine(url, timeout, pre_ping=False)
        self._lookups = lookups.execution_options(isolation_level="AUTOCOMMIT")
        self._compiled: dict = {}
        self._read = sessionmaker(self.engine, expire_on_commit=False)
        self._write = sessionmaker(writer, expire_on_commit=False)
        self._watch: Any = None  # reads ``data_version`` (sqlite3's or psycopg's connection), opened on first use
        self._watch_lock = threading.Lock()
        self._watchable = self.dialect != "sqlite" or make_url(url).database not in (None, "", ":memory:")

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self._read() as session, session.begin():
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        with self._write() as session, session.begin():
            yield session

    def first_row(self, statement: Select, params: dict) -> tuple | None:
        """The first row of one SELECT, or None: the hot path's lookup, in no explicit
        transaction (a lone SELECT sees one consistent snapshot on both databases).

        On SQLite it runs on a pooled DBAPI connection directly (the connection is in
        autocommit mode, see ``make_engine``): SQLAlchemy's connection and result layers cost
        more than the query itself there. Errors are raised as SQLAlchemy's, so they map to the
        same problems. On Postgres the round trip dominates, and the statement goes through
        SQLAlchemy on a pool without pre-ping (one round trip, not two). A connection the server dropped
        (a restart, a terminated backend) fails on use instead; SQLAlchemy then discards the
        pool's older connections, and the lookup, which changes nothing, is retried once.
        """
        if self.dialect != "sqlite":
            try:
                return self._lookup(statement, params)
            except DBAPIError as exc:
                if not exc.connection_invalidated:
                    raise
            return self._lookup(statement, params)
        compiled = self._compiled.get(statement)
        if compiled is None:
            compiled = self._compiled[statement] = statement.compile(dialect=self.engine.dialect)
        values = compiled.construct_params(params)
        order = compiled.positiontup
        if order is None:  # SQLite's paramstyle (qmark) is positional: its compiler always sets the order
            raise TypeError("the statement did not compile to positional parameters")
        positional = tuple(values[key] for key in order)
        dbapi_error = self.engine.dialect.loaded_dbapi.Error
        connection = self.engine.raw_connection()
        try:
            cursor = connection.cursor()
            try:
                cursor.execute(compiled.string, positional)
                return cursor.fetchone()
            finally:
                cursor.close()
        except dbapi_error as exc:
            raise DBAPIError.instance(compiled.string, positional, exc, dbapi_error) from exc
        finally:
            connection.close()

    def data_version(self) -> int | None:
        """A number that changes whenever a commit, by any connection of this process or another,
        may change what a reference resolves to. SQLite: ``PRAGMA data_version``, which counts every
        commit of every *other* connection, read on a connection of its own that never writes.
        Postgres: the registry's generation (``registry_generation``, moved by triggers in the
        writing transaction itself: migration 0018), one prepared primary-key read on a connection
        of its own in autocommit. ``None`` where there is no such counter (an in-memory SQLite
        database, a Postgres database not migrated to 0018, a connection that failed twice): the
        caller must then ask the database itself.

        Read it *before* reading what it guards: a commit between the two then shows as a newer
        number at the next read, never as an old number with new data."""
        if not self._watchable:
            return None
        with self._watch_lock:
            if self.dialect == "sqlite":
                if self._watch is None:
                    pooled = self.engine.raw_connection()
                    pooled.detach()  # its own for good: never handed to a writer
                    self._watch = pooled.dbapi_connection
                return self._watch.execute("PRAGMA data_version").fetchone()[0]
            return self._generation()

    def _generation(self) -> int | None:
        """The registry's generation on Postgres (the caller holds ``_watch_lock``); a connection
        the server dropped is opened again once."""
        import psycopg

        for attempt in (1, 2):
            try:
                if self._watch is None:
                    pooled = self._lookups.engine.raw_connection()
                    pooled.detach()  # its own for good, in autocommit: no transaction left open
                    self._watch = pooled.dbapi_connection
                    self._watch.autocommit = True
                row = self._watch.execute(GENERATION, prepare=True).fetchone()
                return None if row is None else row[0]
            except psycopg.errors.UndefinedTable:
                return None  # not migrated to 0018: no counter (asked again next time)
            except psycopg.Error:
                self._close_watch()
                if attempt == 2:
                    return None
        return None

    def _close_watch(self) -> None:
        if self._watch is not None:
            with suppress(Exception):  # a connection already broken closes as it can
                self._watch.close()
            self._watch = None

    def _lookup(self, statement: Select, params: dict) -> tuple | None:
        with self._lookups.connect() as connection:
            return connection.execute(statement, params).first()

    def dispose(self) -> None:
        with self._watch_lock:
            self._close_watch()
        self.engine.dispose()
        self._lookups.engine.dispose()
