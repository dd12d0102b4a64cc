"""A job its engine refuses is not left queued with nobody to run it: the request is answered 503 with
a Retry-After, and the job is withdrawn, so that it neither shows as queued nor counts against
CALIBRATION_JOB_QUEUE_LIMIT (a queue of such jobs would refuse every job after a while). The refusal is
real: Procrastinate's defer function is dropped from the test's database (as a queue whose schema was
lost would answer), and the embedded engine's process pool is shut down (as during a stop)."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from starlette.testclient import TestClient

from app.jobs.runner import EmbeddedEngine, JobRunner
from app.jobs.tasks import run_job
from app.main import create_app
from app.platform.db import Database
from app.platform.errors import Unavailable
from app.registry.schemas import EXAMPLE_LABELS, EXAMPLE_LOGITS
from app.settings import Settings

FIT = {"method": "auto", "logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS}


@pytest.mark.postgres
def test_a_job_the_procrastinate_queue_refuses_is_answered_503_and_not_left_queued(migrated_postgres_url):
    engine = create_engine(migrated_postgres_url)
    with engine.begin() as connection:
        connection.execute(text("DROP FUNCTION procrastinate_defer_jobs_v1"))
    engine.dispose()
    settings = Settings(database_url=migrated_postgres_url, job_engine="procrastinate", schedule_seconds=0)
    with TestClient(create_app(settings)) as client:
        refused = client.post("/v1/calibrators/queued/versions", json=FIT, headers={"Prefer": "respond-async"})
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] == "30" and "did not take the job" in refused.json()["detail"]
        assert client.get("/v1/jobs").json()["jobs"] == []
        assert client.get("/v1/calibrators/queued/versions").status_code == 404  # nothing fitted either


def test_a_job_the_embedded_pool_refuses_is_answered_unavailable_and_withdrawn(migrated_sqlite_url):
    database = Database(migrated_sqlite_url)
    engine = EmbeddedEngine(run_job, migrated_sqlite_url, processes=1, heartbeat_seconds=1.0)
    engine.shutdown()  # what a submit during the server's stop meets
    runner = JobRunner(database, engine, queue_limit=1)
    try:
        for _ in range(2):  # the first refusal does not use up the only place in the queue
            with pytest.raises(Unavailable, match="did not take the job"):
                runner.submit("fit", "queued", {}, None)
        assert runner.list(None, None, 10) == []
    finally:
        database.dispose()
