"""The migrated Postgres databases the tests share (``MigratedPostgres`` in support/databases.py): a
copy handed back after a test comes back, under a new name, with nothing of that test in it (every
table and sequence as in the template, its sessions ended); one whose schema the test changed is
dropped, and the next test gets a new copy."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy.engine import make_url

from app.platform.db import libpq_url
from tests.service.support.clients import app_client
from tests.service.support.databases import SCHEMA, SEQUENCES, MigratedPostgres, admin_execute
from tests.service.support.fits import fit

pytestmark = pytest.mark.postgres


def contents(url: str) -> tuple[dict, list]:
    """Every table's rows (binary COPY) and every sequence's position."""
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        tables = {}
        for (table,) in connection.execute("SELECT format('%I.%I', schemaname, tablename) FROM pg_tables "
                                           "WHERE schemaname = 'public'").fetchall():
            with connection.cursor().copy(f"COPY {table} TO STDOUT (FORMAT binary)") as copy:
                tables[table] = b"".join(bytes(block) for block in copy)
        return tables, connection.execute(SEQUENCES).fetchall()


def exists(url: str) -> bool:
    with psycopg.connect(libpq_url(make_url(url).set(database="postgres").render_as_string(False)),
                         autocommit=True) as connection:
        return connection.execute("SELECT EXISTS (SELECT FROM pg_database WHERE datname = %s)",
                                  (make_url(url).database,)).fetchone()[0]


@pytest.fixture
def databases(postgres_head):
    copies = MigratedPostgres(postgres_head)
    yield copies
    copies.close()


def test_a_copy_handed_back_is_emptied_and_renamed_and_its_sessions_end(databases, postgres_head):
    url = databases.take()
    template_rows, template_sequences = contents(url)
    assert template_rows["public.alembic_version"] and template_rows["public.registry_generation"]
    with app_client(url) as client:  # versions, an alias, settings: the registry's generation moves
        fit(client)
        fit(client)
        assert client.put("/v1/calibrators/demo/aliases/production", json={"version": 1}).status_code == 200
    lingering = psycopg.connect(libpq_url(url), autocommit=True)
    lingering.execute("SELECT nextval(sequencename::regclass) FROM pg_sequences WHERE schemaname = 'public'")
    written, _ = contents(url)
    assert written["public.calibrator_versions"] != template_rows["public.calibrator_versions"]
    assert written["public.registry_generation"] != template_rows["public.registry_generation"]

    databases.give_back(url)
    again = databases.take()
    assert again != url and not exists(url)
    assert contents(again) == (template_rows, template_sequences)
    with pytest.raises(psycopg.OperationalError):
        lingering.execute("SELECT 1")
    with app_client(again) as client:  # and the app numbers from 1 again
        assert fit(client).json()["version"] == 1
    databases.give_back(again)


@pytest.mark.parametrize("change", ["ALTER TABLE calibrators ADD COLUMN extra integer",
                                    "ALTER TABLE calibrator_versions DISABLE TRIGGER ALL",
                                    "CREATE OR REPLACE FUNCTION bump_registry_generation() RETURNS trigger "
                                    "LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$"],
                         ids=["column", "trigger", "function"])
def test_a_copy_whose_schema_changed_is_dropped(databases, change):
    url = databases.take()
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        before = connection.execute(SCHEMA).fetchone()[0]
        connection.execute(change)
        assert connection.execute(SCHEMA).fetchone()[0] != before
    databases.give_back(url)
    assert not exists(url) and databases.free == []
    fresh = databases.take()
    with psycopg.connect(libpq_url(fresh), autocommit=True) as connection:
        assert connection.execute(SCHEMA).fetchone()[0] == before
    admin_execute(f'DROP DATABASE "{make_url(fresh).database}"')
