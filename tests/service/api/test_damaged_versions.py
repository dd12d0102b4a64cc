"""A damaged stored version is that version's problem: its digest covers every stored column (the
report included), a GET or calibrate of it is a problem document naming it, and the version list
and the other versions are served as before (the list marks the damaged one). Rows are damaged
directly in the database, on SQLite and Postgres."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text
from starlette.testclient import TestClient

from app.main import create_app
from app.platform.migrate import upgrade
from app.registry.schemas import EXAMPLE_LABELS, EXAMPLE_LOGITS
from app.settings import Settings

FIT = {"method": "temperature", "logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS,
       "class_names": ["cat", "dog", "eel"], "description": "first", "tags": {"team": "vision"}}
BATCH = {"logits": EXAMPLE_LOGITS[:2]}
TITLE = "Stored calibrator failed its integrity check"
# a value for each stored column of a version (JSON columns as JSON text), each a change that a
# reader could not tell from a real version
CHANGES = {
    "method": "platt", "input_kind": "probabilities", "n_classes": 4, "n_samples": 7,
    "class_names": '["eel", "dog", "cat"]', "summary": '{"temperature": 1.0}',
    "diagnostics": '{"converged": true, "iterations": 1, "message": "ok", "seconds": 0.0}',
    "report": '{"n_samples": 1}', "description": "second", "tags": '{"team": "text"}',
    "tensor_names": '{"input": "x"}', "created_at": datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC),
}
JSON_COLUMNS = {"class_names", "summary", "diagnostics", "report", "tags", "tensor_names"}


def _client(url: str) -> TestClient:
    return TestClient(create_app(Settings(database_url=url, job_engine="embedded")))


def _damage(client: TestClient, version: int, column: str, value, as_json: bool = False) -> None:
    """Write ``value`` into ``column`` of ``version`` behind the service's back."""
    db = client.app.state.db
    target = "CAST(:value AS JSON)" if as_json and db.dialect == "postgresql" else ":value"
    with db.write() as session:
        session.execute(text(f"UPDATE calibrator_versions SET {column} = {target} WHERE version = :version"),
                        {"value": value, "version": version})


def _fit(client: TestClient, times: int) -> None:
    for _ in range(times):
        assert client.post("/v1/calibrators/demo/versions", json=FIT).status_code == 201


def _refused(answer, version: int) -> None:
    """A problem document that names the damaged version, not a traceback."""
    assert answer.status_code == 500, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["title"] == TITLE and problem["calibrator"] == "demo" and problem["version"] == version
    assert f"version {version}" in problem["detail"] and "Traceback" not in answer.text


def test_a_changed_report_is_that_versions_problem_and_the_others_are_served(database_url):
    with _client(database_url) as client:
        _fit(client, 3)
        _damage(client, 2, "report", CHANGES["report"], as_json=True)
        _refused(client.get("/v1/calibrators/demo/versions/2"), 2)
        listed = client.get("/v1/calibrators/demo/versions")
        assert listed.status_code == 200, listed.text
        assert [v["version"] for v in listed.json()["versions"]] == [3, 1]
        [damaged] = listed.json()["damaged"]
        assert damaged["version"] == 2 and "do not match their digest" in damaged["detail"]
        for version in (1, 3):
            assert client.get(f"/v1/calibrators/demo/versions/{version}").json()["report"]["n_samples"] == 8
        page = client.get("/ui/calibrators/demo")
        assert page.status_code == 200 and 'data-damaged="2"' in page.text
        assert client.get("/ui/calibrators/demo/versions/2").status_code == 500
    with _client(database_url) as fresh:  # nothing cached: serving checks the whole record too
        _refused(fresh.post("/v1/calibrators/demo/versions/2/calibrate", json=BATCH), 2)
        for version in (1, 3):
            assert fresh.post(f"/v1/calibrators/demo/versions/{version}/calibrate", json=BATCH).status_code == 200


def test_the_digest_covers_every_stored_column(database_url):
    with _client(database_url) as client:
        _fit(client, len(CHANGES) + 1)
        for version, (column, value) in enumerate(CHANGES.items(), start=1):
            _damage(client, version, column, value, as_json=column in JSON_COLUMNS)
        for version in range(1, len(CHANGES) + 1):
            _refused(client.get(f"/v1/calibrators/demo/versions/{version}"), version)
        listed = client.get("/v1/calibrators/demo/versions").json()
        assert [v["version"] for v in listed["versions"]] == [len(CHANGES) + 1]
        assert [d["version"] for d in listed["damaged"]] == list(range(len(CHANGES), 0, -1))


@pytest.mark.parametrize("column", ["params_json", "report", "summary", "created_at"])
def test_a_column_that_cannot_be_read_is_that_versions_problem_on_sqlite(sqlite_url, column):
    """SQLite keeps whatever text is written (Postgres refuses JSON that does not parse)."""
    upgrade(sqlite_url)
    with _client(sqlite_url) as client:
        _fit(client, 2)
        _damage(client, 1, column, '{"before": ')
        _refused(client.get("/v1/calibrators/demo/versions/1"), 1)
        listed = client.get("/v1/calibrators/demo/versions")
        assert listed.status_code == 200, listed.text
        assert [v["version"] for v in listed.json()["versions"]] == [2]
        assert [d["version"] for d in listed.json()["damaged"]] == [1]
        assert client.get("/ui/calibrators/demo").status_code == 200
    with _client(sqlite_url) as fresh:
        _refused(fresh.post("/v1/calibrators/demo/versions/1/calibrate", json=BATCH), 1)
        assert fresh.post("/v1/calibrators/demo/calibrate", json=BATCH).status_code == 200


def test_params_that_are_not_json_are_that_versions_problem(database_url):
    with _client(database_url) as client:
        _fit(client, 2)
        _damage(client, 2, "params_json", "{")
        _refused(client.get("/v1/calibrators/demo/versions/2"), 2)
        listed = client.get("/v1/calibrators/demo/versions").json()
        assert [v["version"] for v in listed["versions"]] == [1]
        assert [d["version"] for d in listed["damaged"]] == [2]
