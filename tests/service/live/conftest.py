"""Fixtures of the live tests: ``procrastinate``, the API on Postgres with the Procrastinate job
engine and a function that starts worker processes (the job and fan-out tests use it)."""

from __future__ import annotations

import httpx
import pytest

from tests.service.support.jobs import Workers
from tests.service.support.live import live_server


@pytest.fixture
def procrastinate(migrated_postgres_url, tmp_path, request):
    """The API on Postgres with the Procrastinate engine, and a function that starts workers; a
    test marked ``failed_jobs`` may leave failed jobs (it kills a worker mid-job)."""
    postgres_url = migrated_postgres_url
    env = {"CALIBRATION_JOB_ENGINE": "procrastinate", "CALIBRATION_JOB_STALE_SECONDS": "3"}
    started = []

    def workers(concurrency: int) -> Workers:
        started.append(Workers(postgres_url, concurrency, env, open(tmp_path / "workers.log", "ab")))  # noqa: SIM115
        return started[-1]

    with live_server(postgres_url, env=env, log_file=tmp_path / "server.log", migrated=True,
                     expect_failed_jobs=request.node.get_closest_marker("failed_jobs") is not None) as base, \
            httpx.Client(base_url=base, timeout=120) as http:
        yield postgres_url, http, workers
    for running in started:
        running.stop()
