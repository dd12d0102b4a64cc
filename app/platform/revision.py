"""The schema revision a database is at and the one this code needs, read without Alembic: every
server process's readiness probe compares the two, and importing Alembic and walking the migration
scripts would cost that process more than the rest of its start-up after the application's imports.
``app.platform.migrate`` (Alembic) runs the migrations; tests/service/migrations check that ``HEAD``
is the head of its scripts."""

from __future__ import annotations

from sqlalchemy import inspect, text
from sqlalchemy.engine import Engine

#: the revision of the newest migration (``migrations/versions``): each new migration moves it
HEAD = "0019"
VERSION_TABLE = "alembic_version"  # Alembic's default, which migrations/env.py keeps


def current_revision(engine: Engine) -> str | None:
    """The revision the database's version table records, as Alembic reads it; ``None`` where it has
    no such table or no row (a database never migrated, or migrated down to base)."""
    with engine.connect() as connection:
        if not inspect(connection).has_table(VERSION_TABLE):
            return None
        revisions = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    if len(revisions) > 1:
        raise ValueError(f"the version table records more than one head: {', '.join(sorted(revisions))}")
    return revisions[0] if revisions else None
