"""The scheduler's ``alarms`` job is submitted again when the one it submitted ended without success
(cancelled, failed, or its worker lost), though no new data arrived since: the drift monitors must not
stay behind the stored rows until more rows come. A job that keeps ending so is retried after 1, 2,
4, ... ticks, and one that succeeded is not repeated.

On Postgres with the Procrastinate engine and no worker, so a submitted job stays queued until the
test cancels it through the API, as an operator would."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from app.main import create_app
from app.promotion.scheduler import Scheduler
from app.registry.schemas import EXAMPLE_LABELS, EXAMPLE_LOGITS
from app.settings import Settings

NAME = "watched"


def _ok(response, status: int = 200) -> dict:
    assert response.status_code == status, response.text
    return response.json()


def _alarms_jobs(client: TestClient) -> list[dict]:
    return [job for job in _ok(client.get("/v1/jobs"))["jobs"] if job["kind"] == "alarms"]


@pytest.mark.postgres
def test_an_alarms_job_that_ended_without_success_is_submitted_again_with_backoff(migrated_postgres_url):
    settings = Settings(database_url=migrated_postgres_url, job_engine="procrastinate", schedule_seconds=0,
                        log_writer="thread")
    with TestClient(create_app(settings)) as client:
        _ok(client.post(f"/v1/calibrators/{NAME}/versions",
                        json={"method": "temperature", "logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS}), 201)
        _ok(client.put(f"/v1/calibrators/{NAME}/logging", json={"sample_rate": 1}))
        _ok(client.post(f"/v1/calibrators/{NAME}/calibrate", json={"logits": EXAMPLE_LOGITS}))
        scheduler = Scheduler(client.app.state.service, 0)

        first = scheduler.tick()
        assert [job["kind"] for job in first] == ["alarms"]
        assert scheduler.tick() == []  # queued, no new data: nothing more
        _ok(client.delete(f"/v1/jobs/{first[0]['id']}"))

        second = scheduler.tick()  # the rows are still not evaluated: submitted again at once
        assert [job["kind"] for job in second] == ["alarms"] and second[0]["id"] != first[0]["id"]
        _ok(client.delete(f"/v1/jobs/{second[0]['id']}"))
        assert scheduler.tick() == []  # the second ending without success: one tick's wait
        third = scheduler.tick()
        assert [job["kind"] for job in third] == ["alarms"]
        _ok(client.delete(f"/v1/jobs/{third[0]['id']}"))
        waits = 0
        while not (fourth := scheduler.tick()):
            waits += 1
        assert waits == 3 and [job["kind"] for job in fourth] == ["alarms"]  # then three ticks' wait

        statuses = {job["id"]: job["status"] for job in _alarms_jobs(client)}
        assert statuses == {first[0]["id"]: "cancelled", second[0]["id"]: "cancelled",
                            third[0]["id"]: "cancelled", fourth[0]["id"]: "queued"}

        # new rows start afresh: submitted at once, whatever the previous rows' failures
        _ok(client.delete(f"/v1/jobs/{fourth[0]['id']}"))
        _ok(client.post(f"/v1/calibrators/{NAME}/calibrate", json={"logits": EXAMPLE_LOGITS}))
        assert [job["kind"] for job in scheduler.tick()] == ["alarms"]
