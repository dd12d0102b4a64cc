"""The compact prediction log (migration 0009): a batch of generated ids logged in full is one
index row, client and sampled ids one row each, and labels still answer per id, on SQLite and
Postgres; a database with rows written before 0009 reads the same after the upgrade, and back."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session
from starlette.testclient import TestClient

from app.db import make_engine
from app.main import create_app
from app.migrate import downgrade, upgrade
from app.observation_store import claim_labels, find_logged, log_predictions, logged_counts
from app.settings import Settings
from tests.service.test_api import LOGITS, fit, npy


def _ok(response, status=200):
    assert response.status_code == status, response.text
    return response.json()


def _index_rows(url: str) -> list[tuple]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return [tuple(r) for r in connection.execute(text(
                "SELECT prediction_id, row, labelled, n_rows FROM logged_predictions ORDER BY chunk_id, row"))]
    finally:
        engine.dispose()


def _serve(client, name="demo"):
    """Two JSON batches with generated ids, one .npy batch with generated ids, one with client ids."""
    served = []
    for rows in (LOGITS[:5], LOGITS[5:8]):
        served += _ok(client.post(f"/v1/calibrators/{name}/calibrate", json={"logits": rows.tolist()}))["ids"]
    binary = client.post(f"/v1/calibrators/{name}/calibrate", content=npy(LOGITS[8:12]),
                         headers={"content-type": "application/x-npy", "accept": "application/x-npy"})
    assert binary.status_code == 200 and binary.headers["prediction-logged"] == "4"
    served += [f"{binary.headers['prediction-id-prefix']}{i}" for i in range(4)]
    given = ["a", "b-0", "c"]
    body = _ok(client.post(f"/v1/calibrators/{name}/calibrate", json={"logits": LOGITS[12:15].tolist(), "ids": given}))
    assert body["ids"] == given
    return served + given


def test_generated_ids_are_one_index_row_per_batch_and_labels_answer_per_id(database_url):
    app = create_app(Settings(database_url=database_url, job_engine="embedded", log_flush_seconds=60))
    with TestClient(app) as client:
        fit(client)
        _ok(client.put("/v1/calibrators/demo/logging", json={"sample_rate": 1.0}))
        served = _serve(client)
        assert len(served) == 15 == len(set(served))
        app.state.service.prediction_log.flush()
        rows = _index_rows(database_url)
        # three batches (5, 3 and 4 generated ids) and three client ids, all in one chunk
        assert [(r[1], r[3]) for r in rows if r[0].endswith(",")] == [(0, 5), (5, 3), (8, 4)]
        assert sorted((r[0], r[1], r[3]) for r in rows if not r[0].endswith(",")) == [
            ("a", 12, 1), ("b-0", 13, 1), ("c", 14, 1)]
        logged = _ok(client.get("/v1/calibrators/demo/observations"))["prediction_log"]
        assert logged == {"sample_rate": 1.0, "logged": 15, "labelled": 0}

        # labels for some generated and client ids, a duplicate, an unknown id, one past a batch's end
        prefix = served[0][:-1]
        ids = [served[1], served[6], served[11], "b-0", served[1], f"{prefix}5", "nope", f"{prefix},"]
        labels = [int(v) for v in np.arange(len(ids)) % 4]
        body = _ok(client.post("/v1/calibrators/demo/labels", json={"ids": ids, "labels": labels}))
        assert body["statuses"] == ["labelled"] * 4 + ["duplicate", "unknown", "unknown", "unknown"]
        again = _ok(client.post("/v1/calibrators/demo/labels",
                                json={"ids": [served[6], served[0], "a"], "labels": [0, 1, 2]}))
        assert again["statuses"] == ["already_labelled", "labelled", "labelled"]
        summary = _ok(client.get("/v1/calibrators/demo/observations"))
        assert summary["prediction_log"] == {"sample_rate": 1.0, "logged": 15, "labelled": 6}
        assert summary["by_source"] == {"feedback": 6}

        # each label joined the chunk row that was served under its id
        labelled = _index_rows(database_url)
        positions = sorted(r[1] for r in labelled if r[2])
        assert positions == sorted([1, 6, 11, 13, 0, 12])
        assert sum(r[3] for r in labelled) == 15


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request) -> str:
    return request.getfixturevalue(f"{request.param}_url")


def test_rows_logged_before_0009_read_the_same_after_it_and_a_downgrade_expands_batches(empty_url):
    url = empty_url
    upgrade(url, "0008")
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO calibrators (id, name, last_version, created_at, log_sample_rate) "
                                "VALUES (1, 'old', 1, '2026-11-01 00:00:00', 1.0)"))
        chunk = connection.execute(text(
            "INSERT INTO prediction_chunks (calibrator_id, version, input_kind, n_rows, n_classes, dtype, "
            "inputs, created_at) VALUES (1, 1, 'logits', 2, 4, '<f8', :data, '2026-11-01 00:00:00') RETURNING id"),
            {"data": np.arange(8, dtype="<f8").tobytes()}).scalar_one()
        connection.execute(text("INSERT INTO logged_predictions (calibrator_id, prediction_id, chunk_id, row, "
                                "labelled) VALUES (1, 'x', :c, 0, false), (1, 'y', :c, 1, true)"), {"c": chunk})
    engine.dispose()
    upgrade(url)
    assert _index_rows(url) == [("x", 0, False, 1), ("y", 1, True, 1)]

    engine = make_engine(url)
    with Session(engine) as session, session.begin():
        assert find_logged(session, 1, ["x", "y", "z"]) == {"x": (chunk, 0, False), "y": (chunk, 1, True)}
        log_predictions(session, 1, 1, "logits", 4, np.zeros((3, 4)), [], [("0123456789abcdef-", 0, 3)])
        assert claim_labels(session, 1, ["x", "0123456789abcdef-2"]) == {"x", "0123456789abcdef-2"}
        assert claim_labels(session, 1, ["x", "0123456789abcdef-2"]) == set()
        assert logged_counts(session, 1) == (5, 3)
    engine.dispose()
    downgrade(url, "0008")
    rows = _index_rows_0008(url)
    assert rows == [("x", chunk, 0, True), ("y", chunk, 1, True), ("0123456789abcdef-0", chunk + 1, 0, False),
                    ("0123456789abcdef-1", chunk + 1, 1, False), ("0123456789abcdef-2", chunk + 1, 2, True)]


def _index_rows_0008(url: str) -> list[tuple]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return [(pid, chunk, row, bool(labelled)) for pid, chunk, row, labelled in connection.execute(text(
                "SELECT prediction_id, chunk_id, row, labelled FROM logged_predictions ORDER BY chunk_id, row"))]
    finally:
        engine.dispose()


def test_sampled_generated_ids_keep_one_row_each_and_the_rest_are_unknown(sqlite_url):
    upgrade(sqlite_url)
    app = create_app(Settings(database_url=sqlite_url, job_engine="embedded", log_flush_seconds=60))
    with TestClient(app) as client:
        fit(client)
        _ok(client.put("/v1/calibrators/demo/logging", json={"sample_rate": 0.5}))
        body = _ok(client.post("/v1/calibrators/demo/calibrate", json={"logits": LOGITS[:200].tolist()}))
        app.state.service.prediction_log.flush()
        rows = _index_rows(sqlite_url)
        assert len(rows) == body["logged"] and 0 < body["logged"] < 200
        assert all(not pid.endswith(",") and n == 1 for pid, _, _, n in rows)
        kept = {pid for pid, _, _, _ in rows}
        answer = _ok(client.post("/v1/calibrators/demo/labels", json={"ids": body["ids"], "labels": [0] * 200}))
        assert answer["statuses"] == ["labelled" if pid in kept else "unknown" for pid in body["ids"]]
