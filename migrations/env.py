"""Alembic environment: the same database settings as the app (``DATABASE_URL``), unless the
caller put a URL on the Alembic config (``app.platform.migrate`` does). SQLite runs in batch mode, with
foreign keys off while it migrates."""

from alembic import context

from app.all_rows import Base
from app.platform.db import make_engine
from app.platform.migrate import include_name
from app.settings import get_settings

config = context.config

url = config.attributes.get("database_url") or get_settings().database_url


def run_migrations_offline() -> None:
    context.configure(url=url, target_metadata=Base.metadata, literal_binds=True,
                      render_as_batch=url.startswith("sqlite"))
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = make_engine(url)
    with engine.connect() as connection:
        if connection.dialect.name == "sqlite":
            # batch mode rebuilds a table (create a copy, DROP the original, rename): with foreign keys
            # on, the DROP of a parent table would cascade and delete its children's rows
            # (on the driver's connection, outside any transaction: inside one the pragma does nothing)
            connection.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")
        context.configure(connection=connection, target_metadata=Base.metadata, include_name=include_name,
                          render_as_batch=connection.dialect.name == "sqlite")
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
