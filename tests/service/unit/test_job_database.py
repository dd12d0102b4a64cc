"""The jobs one process runs share one ``Database`` (``app.jobs.tasks.job_database``): the first job
opens its engine's connections, a later job on the same database opens none; the embedded pool's
processes and the Procrastinate workers run every job of theirs there."""

from __future__ import annotations

import pytest
from sqlalchemy import event, insert
from sqlalchemy.engine import Engine

from app.jobs import store as job_store
from app.jobs import tasks
from app.platform.db import Database
from app.registry.rows import CalibratorRow
from app.settings import get_settings
from app.wiring import run_job


@pytest.fixture
def connections():
    """The DBAPI connections every engine of this process opens while the test runs."""
    opened: list[object] = []

    def count(dbapi_connection, _record) -> None:
        opened.append(dbapi_connection)

    event.listen(Engine, "connect", count)
    yield opened
    event.remove(Engine, "connect", count)


def test_a_second_job_in_one_process_opens_no_new_connection(database_url, connections):
    setup = Database(database_url)
    with setup.write() as session:
        session.execute(insert(CalibratorRow), {"name": "pooled"})
        for job_id in ("first", "second"):
            job_store.create_job(session, job_id, "alarms", "pooled", {}, None)
    setup.dispose()
    try:
        connections.clear()
        run_job(database_url, "first")
        opened_by_first = len(connections)
        run_job(database_url, "second")
        assert opened_by_first >= 1 and len(connections) == opened_by_first
        db = tasks.job_database(database_url, get_settings().db_timeout_seconds)
        with db.read() as session:
            assert [job_store.get_job(session, job_id).status for job_id in ("first", "second")] == [
                "succeeded", "succeeded"]
    finally:
        tasks.job_database(database_url, get_settings().db_timeout_seconds).dispose()
