"""The compact prediction log (migrations 0009 and 0010): a batch of generated ids is one index
row, client ids one row each, a sampling rate keeps whole requests, and labels still answer per id
and join the row that was served, on SQLite and Postgres; a database with rows written before 0009,
or by the release that sampled rows (0010's ``kept``), reads the same after the upgrade, and back."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
from sqlalchemy import text
from sqlalchemy.orm import Session
from starlette.testclient import TestClient

from app.main import create_app
from app.platform.db import Database, make_engine
from app.platform.migrate import downgrade, downgrade_losses, upgrade
from app.prediction_log.lookup import claim_labels, find_logged
from app.prediction_log.service import PredictionLog
from app.prediction_log.store import log_predictions, logged_counts, prediction_chunks
from app.registry.store import ResolvedVersion
from app.settings import Settings
from tests.service.support.fits import LOGITS, fit, npy


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


def _where(found: dict) -> dict[str, tuple]:
    """``find_logged``'s answer as ``{id: (chunk, row, labelled)}``."""
    return {pid: tuple(logged[:3]) for pid, logged in found.items()}


def _claim(session, calibrator_id: int, ids: list[str]) -> set[str]:
    return claim_labels(session, calibrator_id, find_logged(session, calibrator_id, ids))


@contextmanager
def log_session(url: str, name: str = "old", rate: float = 0.5):
    """A write session on a migrated database holding calibrator 1, ``name``, logging at ``rate``."""
    upgrade(url)
    engine = make_engine(url)
    try:
        with Session(engine) as session, session.begin():
            session.execute(text("INSERT INTO calibrators (id, name, last_version, created_at, log_sample_rate) "
                                 "VALUES (1, :name, 1, '2026-11-01 00:00:00', :rate)"), {"name": name, "rate": rate})
            yield session
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
        # three client ids (first: one statement writes their rows 0, 1, 2) and three batches (5, 3
        # and 4 generated ids), all in one chunk
        assert sorted((r[0], r[1], r[3]) for r in rows if not r[0].endswith(",")) == [
            ("a", 0, 1), ("b-0", 1, 1), ("c", 2, 1)]
        assert [(r[1], r[3]) for r in rows if r[0].endswith(",")] == [(3, 5), (8, 3), (11, 4)]
        logged = _ok(client.get("/v1/calibrators/demo/observations"))["prediction_log"]
        assert logged == {"sample_rate": 1.0, "logged": 15, "labelled": 0, "logged_rows": 15, "dropped": 0,
                          "full": False}

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
        assert summary["prediction_log"] == {"sample_rate": 1.0, "logged": 15, "labelled": 6, "logged_rows": 15,
                                             "dropped": 0, "full": False}
        assert summary["by_source"] == {"feedback": 6}

        # each label joined the chunk row that was served under its id
        labelled = _index_rows(database_url)
        positions = sorted(r[1] for r in labelled if r[2])
        assert positions == sorted([3 + 1, 8 + 1, 11 + 3, 1, 3 + 0, 0])
        assert sum(r[3] for r in labelled) == 15


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
        assert _where(find_logged(session, 1, ["x", "y", "z"])) == {"x": (chunk, 0, False), "y": (chunk, 1, True)}
        log_predictions(session, 1, 1, "logits", 4, np.zeros((3, 4)), [], [("0123456789abcdef-", 0, 3)])
        assert _claim(session, 1, ["x", "0123456789abcdef-2"]) == {"x", "0123456789abcdef-2"}
        assert _claim(session, 1, ["x", "0123456789abcdef-2"]) == set()
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


def _observed_pairs(url: str) -> list[tuple[tuple, int]]:
    """(input row, label) of every stored observation."""
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            chunks = connection.execute(text(
                "SELECT inputs, labels, dtype, n_rows, n_classes FROM observation_chunks ORDER BY id")).all()
    finally:
        engine.dispose()
    pairs = []
    for inputs, labels, dtype, n, k in chunks:
        x = np.frombuffer(inputs, dtype=dtype).reshape(n, k)
        y = np.frombuffer(labels, "<i4").tolist()
        pairs += [(tuple(row), label) for row, label in zip(x.tolist(), y, strict=True)]
    return pairs


def test_a_sampling_rate_keeps_whole_requests_and_labels_join_the_rows_served(database_url):
    """At rate 0.5 each request is logged whole or not at all (JSON and .npy alike); a label for
    every served id joins the inputs of the logged requests and answers ``unknown`` for the rest."""
    app = create_app(Settings(database_url=database_url, job_engine="embedded", log_flush_seconds=60))
    with TestClient(app) as client:
        fit(client)
        _ok(client.put("/v1/calibrators/demo/logging", json={"sample_rate": 0.5}))
        ids, kept, logged = [], set(), []
        for start in range(0, 300, 10):
            rows = range(start, start + 10)
            if start % 20:
                answer = client.post("/v1/calibrators/demo/calibrate", content=npy(LOGITS[start:start + 10]),
                                     headers={"content-type": "application/x-npy", "accept": "application/x-npy"})
                assert answer.status_code == 200
                served = [f"{answer.headers['prediction-id-prefix']}{i}" for i in range(10)]
                count = int(answer.headers["prediction-logged"])
            else:
                body = _ok(client.post("/v1/calibrators/demo/calibrate", json={"logits": LOGITS[rows].tolist()}))
                served, count = body["ids"], body["logged"]
            assert count in (0, 10)
            ids += served
            logged.append(count)
            kept |= set(rows) if count else set()
        assert 0 < len(kept) < 300  # both outcomes among 30 requests (each 2^-30 to miss)
        app.state.service.prediction_log.flush()
        # one index row per logged batch, at consecutive chunk rows
        assert [(r[0].endswith(","), r[1], r[3]) for r in _index_rows(database_url)] == [
            (True, 10 * j, 10) for j in range(len(kept) // 10)]

        order = np.random.default_rng(3).permutation(300)
        answer = _ok(client.post("/v1/calibrators/demo/labels",
                                 json={"ids": [ids[i] for i in order], "labels": [int(i % 4) for i in order]}))
        assert answer["statuses"] == ["labelled" if i in kept else "unknown" for i in order]
        assert sorted(_observed_pairs(database_url)) == sorted((tuple(LOGITS[i].tolist()), int(i % 4)) for i in kept)
        assert _ok(client.get("/v1/calibrators/demo/observations"))["prediction_log"]["labelled"] == len(kept)


def test_requests_are_kept_at_the_sampling_rate():
    """Each request is kept with probability ``rate``: 4000 draws at 0.25 land within six standard
    deviations of 1000 (a false failure about once in 10^9 runs), and rows of a request together."""
    log = PredictionLog(None)
    resolved = ResolvedVersion("x", 1, "", 1, calibrator_id=1, log_rate=0.25)
    outcomes = [log.record(resolved, "logits", 3, np.zeros((3, 3)), None).logged for _ in range(4000)]
    assert set(outcomes) == {0, 3}
    assert abs(outcomes.count(3) - 1000) <= 6 * (4000 * 0.25 * 0.75) ** 0.5
    assert log.stats.buffered_rows == 3 * outcomes.count(3)


def test_a_sampled_batch_written_at_0010_is_read_and_expanded_by_the_downgrade_to_0009(sqlite_url):
    """Rows of the release that sampled rows one by one (a batch row with the kept ids' numbers)."""
    with log_session(sqlite_url, "old", 0.5) as session:
        log_predictions(session, 1, 1, "logits", 4, np.zeros((3, 4)), [])
        session.execute(text("INSERT INTO logged_predictions (calibrator_id, epoch_id, prediction_id, chunk_id, row, "
                             "labelled, n_rows, kept) VALUES (1, 1, '0123456789abcdef-,', 1, 0, false, 3, :kept)"),
                        {"kept": np.array([1, 4, 9], dtype="<u4").tobytes()})
        assert _claim(session, 1, ["0123456789abcdef-4"]) == {"0123456789abcdef-4"}
        assert _where(find_logged(session, 1, ["0123456789abcdef-0", "0123456789abcdef-9"])) == {
            "0123456789abcdef-9": (1, 2, False)}
    downgrade(sqlite_url, "0009")
    engine = make_engine(sqlite_url)
    with Session(engine) as session, session.begin():
        assert logged_counts(session, 1) == (3, 1)
    engine.dispose()
    assert _index_rows(sqlite_url) == [("0123456789abcdef-1", 0, False, 1), ("0123456789abcdef-4", 1, True, 1),
                                       ("0123456789abcdef-9", 2, False, 1)]


def test_client_ids_with_json_and_sql_metacharacters_are_stored_and_joined_as_given(database_url):
    app = create_app(Settings(database_url=database_url, job_engine="embedded", log_flush_seconds=60))
    odd = ['q"uote', "back\\slash", "{x}", "[1]", "it's", "%s", "?", "a\\u0041", " ".join(["w"] * 3)]
    with TestClient(app) as client:
        fit(client)
        _ok(client.put("/v1/calibrators/demo/logging", json={"sample_rate": 1.0}))
        body = _ok(client.post("/v1/calibrators/demo/calibrate",
                               json={"logits": LOGITS[:len(odd)].tolist(), "ids": odd}))
        assert body["ids"] == odd and body["logged"] == len(odd)
        app.state.service.prediction_log.flush()
        assert sorted(r[0] for r in _index_rows(database_url)) == sorted(odd)
        labels = [i % 4 for i in range(len(odd))]
        answer = _ok(client.post("/v1/calibrators/demo/labels", json={"ids": odd[::-1], "labels": labels[::-1]}))
        assert answer["statuses"] == ["labelled"] * len(odd)
        assert sorted(_observed_pairs(database_url)) == sorted(
            (tuple(LOGITS[i].tolist()), i % 4) for i in range(len(odd)))


def test_client_ids_of_the_generated_form_are_refused(sqlite_url):
    upgrade(sqlite_url)
    app = create_app(Settings(database_url=sqlite_url, job_engine="embedded"))
    with TestClient(app) as client:
        fit(client)
        _ok(client.put("/v1/calibrators/demo/logging", json={"sample_rate": 1.0}))
        served = _ok(client.post("/v1/calibrators/demo/calibrate", json={"logits": LOGITS[:2].tolist()}))["ids"]
        # sent back as the client's own ids (say, to score the rows again): they would stand beside
        # the batch that already holds them, so they are refused, naming the reason
        again = client.post("/v1/calibrators/demo/calibrate", json={"logits": LOGITS[:2].tolist(), "ids": served})
        assert again.status_code == 422 and "generates" in again.json()["detail"], again.text
        near = ["0123456789abcdef-x", "0123456789ABCDEF-1", "0123456789abcde-1"]  # not of that form
        assert _ok(client.post("/v1/calibrators/demo/calibrate",
                               json={"logits": LOGITS[:3].tolist(), "ids": near}))["ids"] == near


def test_client_ids_over_several_statements_keep_their_rows(database_url, monkeypatch):
    from app.prediction_log import store as prediction_log_store
    monkeypatch.setattr(prediction_log_store, "IDS_PER_STATEMENT", 2)
    with log_session(database_url, "many", 1.0) as session:
        ids = ["e", "a", "d", "b", "c"]
        assert log_predictions(session, 1, 1, "logits", 4, np.zeros((5, 4)), ids) == 5
        # a new epoch: "a" has a row in each, and keeps its first
        assert log_predictions(session, 1, 1, "logits", 4, np.zeros((2, 4)), ["f", "a"]) == 2
        found = find_logged(session, 1, [*ids, "f"])
        assert {pid: logged.row for pid, logged in found.items()} == {"e": 0, "a": 1, "d": 2, "b": 3, "c": 4, "f": 0}
        assert len({logged.chunk_id for logged in found.values()}) == 2


def test_an_id_twice_in_one_chunk_keeps_its_first_row_whatever_the_statements_order(database_url, monkeypatch):
    """The writer inserts a chunk's ids sorted by id (SQLite: key-ordered B-tree inserts;
    Postgres: one lock order); a duplicate keeps its first row, not the one sorted first, also
    when the copies fall into two statements."""
    from app.prediction_log import store as prediction_log_store
    with log_session(database_url, "twice", 1.0) as session:
        ids = ["z", "b", "a", "z", "b", "c", "a", "a"]
        assert log_predictions(session, 1, 1, "logits", 4, np.zeros((8, 4)), ids) == 4
        found = find_logged(session, 1, ["a", "b", "c", "z"])
        assert {pid: logged.row for pid, logged in found.items()} == {"z": 0, "b": 1, "a": 2, "c": 5}
        monkeypatch.setattr(prediction_log_store, "IDS_PER_STATEMENT", 3)
        ids = ["y", "x", "w", "x", "w", "y", "v"]  # statements y x w | x w y | v
        assert log_predictions(session, 1, 1, "logits", 4, np.zeros((7, 4)), ids) == 4
        found = find_logged(session, 1, ["v", "w", "x", "y"])
        assert {pid: logged.row for pid, logged in found.items()} == {"y": 0, "x": 1, "w": 2, "v": 6}


def test_downgrades_that_rewrite_the_log_are_not_reported_as_losses_but_dropping_it_is(sqlite_url):
    with log_session(sqlite_url, "old", 0.5) as session:
        log_predictions(session, 1, 1, "logits", 4, np.zeros((3, 4)), ["c"], [("0123456789abcdef-", 1, 2)])
        session.execute(text("UPDATE logged_predictions SET kept = :kept WHERE n_rows = 2"),  # as 0010 sampled
                        {"kept": np.array([0, 7], dtype="<u4").tobytes()})
    assert downgrade_losses(sqlite_url, "0009") == {}
    assert downgrade_losses(sqlite_url, "0008") == {}
    assert downgrade_losses(sqlite_url, "0005") == {"calibrators": 1, "prediction_chunks": 1, "logged_predictions": 2}


def test_a_client_id_served_twice_before_a_flush_keeps_its_first_serving(database_url):
    """Chunks are written grouped by version: ``x`` served by version 1 and then by version 2 (whose
    chunk, opened first by ``a``, is written first) still joins its version-1 row, as it would had a
    flush come between the two servings."""
    with log_session(database_url, "twice", 1.0):
        pass
    db = Database(database_url)
    try:
        log = PredictionLog(db)
        v1, v2 = (ResolvedVersion("twice", v, "", v, calibrator_id=1, log_rate=1.0) for v in (1, 2))
        log.record(v2, "logits", 4, np.full((1, 4), 2.0), ["a"])
        log.record(v1, "logits", 4, np.full((2, 4), 1.0), ["x", "y"])
        log.record(v2, "logits", 4, np.full((2, 4), 3.0), ["y", "x"])
        assert log.flush() == 5
        with db.read() as session:
            found = _where(find_logged(session, 1, ["a", "x", "y"]))
            chunks = prediction_chunks(session, {chunk for chunk, _, _ in found.values()})
        served = {pid: (chunks[chunk][0], chunks[chunk][3][row].tolist()) for pid, (chunk, row, _) in found.items()}
        assert served == {"a": (2, [2.0] * 4), "x": (1, [1.0] * 4), "y": (1, [1.0] * 4)}
        with db.read() as session:
            assert logged_counts(session, 1) == (3, 0)
    finally:
        db.dispose()
