"""Observations and the prediction log in the application (SQLite and Postgres): what is refused
and why, caps, deletes, retention, sampling, and the per-id statuses of label joins."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

import calibration as cal
from app.settings import Settings
from app.wiring import create_app
from tests.helpers import make_reference_input

LOGITS, LABELS = make_reference_input(n=600, k=4, seed=3)


def _app(database_url: str, **settings):
    return create_app(Settings(database_url=database_url, job_engine="embedded", log_flush_seconds=0.05,
                               log_level="warning", **settings))


@pytest.fixture
def api(database_url):
    with TestClient(_app(database_url)) as client:
        yield client


def _append(client, name, start, stop, **extra):
    return client.post(f"/v1/calibrators/{name}/observations",
                       json={"logits": LOGITS[start:stop].tolist(), "labels": LABELS[start:stop].tolist(), **extra})


def test_appends_must_match_the_name_s_kind_and_classes(api):
    assert _append(api, "m", 0, 100).status_code == 201
    probabilities = cal.softmax(LOGITS[:10]).tolist()
    wrong_kind = api.post("/v1/calibrators/m/observations", json={"probabilities": probabilities,
                                                                  "labels": LABELS[:10].tolist()})
    assert wrong_kind.status_code == 422 and "holds logits of 4 classes" in wrong_kind.json()["detail"]
    wrong_k = api.post("/v1/calibrators/m/observations", json={"logits": LOGITS[:10, :3].tolist(),
                                                               "labels": [0] * 10})
    assert wrong_k.status_code == 422 and "3 classes" in wrong_k.json()["detail"]
    bad_label = api.post("/v1/calibrators/m/observations", json={"logits": LOGITS[:2].tolist(), "labels": [0, 4]})
    assert bad_label.status_code == 422
    assert api.get("/v1/calibrators/m/observations").json()["total_rows"] == 100  # nothing half-written


def test_a_fit_names_arrays_or_data_not_both(api):
    _append(api, "m", 0, 100)
    both = api.post("/v1/calibrators/m/versions", json={"method": "temperature", "logits": LOGITS[:5].tolist(),
                                                        "labels": LABELS[:5].tolist(),
                                                        "data": {"observations": {}}})
    assert both.status_code == 422 and "not both" in both.json()["detail"]
    missing = api.post("/v1/calibrators/nobody/versions", json={"method": "temperature",
                                                                "data": {"observations": {}}})
    assert missing.status_code == 404
    naive = api.post("/v1/calibrators/m/versions", json={"method": "temperature",
                                                         "data": {"observations": {"since": "2026-01-01T00:00:00"}}})
    assert naive.status_code == 422 and "UTC offset" in naive.json()["detail"]
    none = api.post("/v1/calibrators/m/versions", json={"method": "temperature",
                                                        "data": {"observations": {"source": "feedback"}}})
    assert none.status_code == 404 and "no observations matching" in none.json()["detail"]


def test_time_ranges_select_back_filled_rows(api):
    _append(api, "m", 0, 200, observed_at="2026-01-01T00:00:00Z")
    _append(api, "m", 200, 600, observed_at="2026-02-01T00:00:00Z")
    summary = api.get("/v1/calibrators/m/observations").json()
    assert summary["by_day"] == {"2026-01-01": 200, "2026-02-01": 400}
    january = api.post("/v1/calibrators/m/versions", json={
        "method": "temperature", "data": {"observations": {"until": "2026-01-15T00:00:00Z"}}}).json()
    direct = cal.create("temperature").fit(LOGITS[:200], LABELS[:200])
    assert january["n_samples"] == 200 and january["parameters"]["temperature"] == direct.temperature_
    deleted = api.delete("/v1/calibrators/m/observations", params={"before": "2026-01-15T00:00:00Z"}).json()
    assert deleted == {"name": "m", "deleted_rows": 200}
    assert api.get("/v1/calibrators/m/observations").json()["total_rows"] == 400
    assert api.delete("/v1/calibrators/m/observations", params={"before": "2026-01-15T00:00:00"}).status_code == 422
    naive = _append(api, "m", 0, 10, observed_at="2026-01-01T00:00:00")
    assert naive.status_code == 422 and "UTC offset" in naive.json()["detail"]
    future = _append(api, "m", 0, 10, observed_at="2999-01-01T00:00:00Z")
    assert future.status_code == 422 and "future" in future.json()["detail"]


def test_per_name_caps_refuse_an_append_whole(database_url):
    with TestClient(_app(database_url, max_observation_rows=250)) as client:
        assert _append(client, "m", 0, 200).status_code == 201
        over = _append(client, "m", 200, 300)
        assert over.status_code == 413 and "CALIBRATION_MAX_OBSERVATION_ROWS" in over.json()["detail"]
        assert client.get("/v1/calibrators/m/observations").json()["total_rows"] == 200
    with TestClient(_app(database_url, max_fit_entries=700)) as client:  # 200 rows x 4 classes are 800
        too_big = client.post("/v1/calibrators/m/versions", json={"method": "temperature",
                                                                  "data": {"observations": {}}})
        assert too_big.status_code == 413 and "CALIBRATION_MAX_FIT_ENTRIES" in too_big.json()["detail"]
        fits = client.post("/v1/calibrators/m/versions", json={"method": "temperature",
                                                               "data": {"observations": {"last": 150}}})
        assert fits.status_code == 201 and fits.json()["n_samples"] == 150


def test_labels_honour_the_per_name_caps(database_url):
    """#34: cap 2000 rows, 1900 appended, 1500 logged predictions labelled: main stored 3400 rows.
    The labels call is a 413 naming the setting, all or nothing (none of the ids is labelled and
    they can be labelled once there is room); 100 of them fit."""
    logits, labels = make_reference_input(n=1900, k=4, seed=34)
    with TestClient(_app(database_url, max_observation_rows=2000)) as client:
        client.post("/v1/calibrators/m/versions", json={"method": "temperature", "logits": LOGITS.tolist(),
                                                        "labels": LABELS.tolist()})
        assert client.post("/v1/calibrators/m/observations", json={"logits": logits.tolist(),
                                                                   "labels": labels.tolist()}).status_code == 201
        client.put("/v1/calibrators/m/logging", json={"sample_rate": 1})
        ids = [f"x{i}" for i in range(1500)]
        served = client.post("/v1/calibrators/m/calibrate", json={"logits": logits[:1500].tolist(), "ids": ids})
        assert served.json()["logged"] == 1500
        over = client.post("/v1/calibrators/m/labels", json={"ids": ids, "labels": labels[:1500].tolist()})
        assert over.status_code == 413, over.text
        assert over.json()["detail"] == ("'m' would hold 3400 observation rows and 108800 bytes, over the caps of 2000 "
                                         "rows and 1073741824 bytes (CALIBRATION_MAX_OBSERVATION_ROWS, _BYTES); "
                                         "delete old ones first")
        assert client.get("/v1/calibrators/m/observations").json()["total_rows"] == 1900
        fits = client.post("/v1/calibrators/m/labels", json={"ids": ids[:100], "labels": labels[:100].tolist()})
        assert fits.json()["labelled"] == 100 and fits.json()["counts"] == {"labelled": 100}
        assert client.get("/v1/calibrators/m/observations").json()["total_rows"] == 2000
        one_more = client.post("/v1/calibrators/m/labels", json={"ids": ids[100:101], "labels": [0]})
        assert one_more.status_code == 413


def test_sampling_keeps_about_the_rate_and_labels_report_the_rest_unknown(api):
    api.post("/v1/calibrators/m/versions", json={"method": "temperature", "logits": LOGITS.tolist(),
                                                 "labels": LABELS.tolist()})
    assert api.put("/v1/calibrators/m/logging", json={"sample_rate": 1.5}).status_code == 422
    assert api.put("/v1/calibrators/m/logging", json={"sample_rate": 0.25}).json()["sample_rate"] == 0.25
    # 75 requests of 8 rows: each kept whole with probability 0.25 (18.75 expected, sd 3.75)
    answers = [api.post("/v1/calibrators/m/calibrate", json={"logits": LOGITS[i:i + 8].tolist()}).json()
               for i in range(0, 600, 8)]
    assert {answer["logged"] for answer in answers} == {0, 8}
    ids = [pid for answer in answers for pid in answer["ids"]]
    logged = sum(answer["logged"] for answer in answers)
    assert len(set(ids)) == 600 and 8 * (18.75 - 4 * 3.75) < logged < 8 * (18.75 + 4 * 3.75)  # 4 sd
    result = api.post("/v1/calibrators/m/labels", json={"ids": ids, "labels": LABELS.tolist()}).json()
    assert result["labelled"] == logged and result["counts"] == {"labelled": logged, "unknown": 600 - logged}
    assert api.put("/v1/calibrators/m/logging", json={"sample_rate": 0}).status_code == 200
    quiet = api.post("/v1/calibrators/m/calibrate", json={"logits": LOGITS[:3].tolist()}).json()
    assert "ids" not in quiet and "logged" not in quiet  # logging off: nothing added to the answer


def test_client_ids_are_checked(api):
    api.post("/v1/calibrators/m/versions", json={"method": "temperature", "logits": LOGITS.tolist(),
                                                 "labels": LABELS.tolist()})
    api.put("/v1/calibrators/m/logging", json={"sample_rate": 1})
    for ids, expected in ((["a", "b"], "2 entries for 3 rows"), (["a", "a", "b"], "distinct"),
                          (["a", "b c ", "d"], "printable ASCII")):
        response = api.post("/v1/calibrators/m/calibrate", json={"logits": LOGITS[:3].tolist(), "ids": ids})
        assert response.status_code == 422 and expected in response.json()["detail"], response.text
    buffer = io.BytesIO()
    np.save(buffer, LOGITS[:3])
    binary = api.post("/v1/calibrators/m/calibrate", content=buffer.getvalue(), params={"ids": "q1,q2,q3"},
                      headers={"content-type": "application/x-npy", "accept": "application/x-npy"})
    assert binary.status_code == 200 and binary.headers["prediction-logged"] == "3"
    assert "prediction-id-prefix" not in binary.headers  # the client's own ids
    generated = api.post("/v1/calibrators/m/calibrate", content=buffer.getvalue(),
                         headers={"content-type": "application/x-npy", "accept": "application/x-npy"})
    prefix = generated.headers["prediction-id-prefix"]
    labelled = api.post("/v1/calibrators/m/labels", json={"ids": ["q2", f"{prefix}0", "q2", f"{prefix}9"],
                                                          "labels": [1, 2, 1, 0]}).json()
    assert labelled["statuses"] == ["labelled", "labelled", "duplicate", "unknown"]
    out_of_range = api.post("/v1/calibrators/m/labels", json={"ids": ["q1", "q3"], "labels": [0, 4]})
    assert out_of_range.status_code == 422
    # all or nothing: q1 was not labelled by the refused call
    assert api.post("/v1/calibrators/m/labels", json={"ids": ["q1"], "labels": [0]}).json()["labelled"] == 1
    feedback = api.get("/v1/calibrators/m/observations").json()
    assert feedback["by_source"] == {"feedback": 3} and feedback["by_version"] == {"1": 3}


def test_retention_deletes_old_rows_on_its_own(database_url):
    settings = {"observation_retention_days": 1.0, "retention_interval_seconds": 0.1}
    with TestClient(_app(database_url, **settings)) as client:
        _append(client, "m", 0, 100, observed_at="2020-01-01T00:00:00Z")
        _append(client, "m", 100, 150)
        deadline = time.monotonic() + 10
        while client.get("/v1/calibrators/m/observations").json()["total_rows"] != 50:
            assert time.monotonic() < deadline, "retention did not run"
            time.sleep(0.1)


def test_deleting_a_calibrator_deletes_its_observations_and_log(api):
    api.post("/v1/calibrators/m/versions", json={"method": "temperature", "logits": LOGITS.tolist(),
                                                 "labels": LABELS.tolist()})
    _append(api, "m", 0, 100)
    api.put("/v1/calibrators/m/logging", json={"sample_rate": 1})
    ids = api.post("/v1/calibrators/m/calibrate", json={"logits": LOGITS[:5].tolist()}).json()["ids"]
    api.post("/v1/calibrators/m/labels", json={"ids": ids[:2], "labels": [0, 1]})
    assert api.delete("/v1/calibrators/m").status_code == 204
    _append(api, "m", 0, 10)  # the name again, fresh
    summary = api.get("/v1/calibrators/m/observations").json()
    assert summary["total_rows"] == 10 and summary["prediction_log"]["logged"] == 0


def test_calibrate_serves_prior_adjusted_probabilities(api):
    """``priors`` re-weights the calibrated posteriors from the fit's class frequencies (stored with
    the version) to the given priors, as calibration.label_shift.adjust_priors does; ``source_priors``
    overrides the fit's."""
    from calibration import label_shift

    fitted = api.post("/v1/calibrators/m/versions", json={"method": "temperature", "logits": LOGITS.tolist(),
                                                          "labels": LABELS.tolist()}).json()
    counts = np.bincount(LABELS, minlength=4)
    assert fitted["report"]["class_counts"] == counts.tolist()
    plain = np.asarray(api.post("/v1/calibrators/m/calibrate", json={"logits": LOGITS[:50].tolist()}).json()[
        "probabilities"])
    target = [0.7, 0.1, 0.1, 0.1]
    shifted = api.post("/v1/calibrators/m/calibrate", json={"logits": LOGITS[:50].tolist(), "priors": target,
                                                            "outputs": ["probabilities", "predicted_class"]}).json()
    expected = label_shift.adjust_priors(plain, counts / counts.sum(), target)
    assert np.allclose(shifted["probabilities"], expected, rtol=0, atol=1e-12)
    assert shifted["predicted_class"] == expected.argmax(axis=1).tolist()
    assert (np.asarray(shifted["predicted_class"]) == 0).sum() > (plain.argmax(axis=1) == 0).sum()
    given = api.post("/v1/calibrators/m/calibrate", json={"logits": LOGITS[:50].tolist(), "priors": target,
                                                          "source_priors": [0.25] * 4}).json()
    assert np.allclose(given["probabilities"], label_shift.adjust_priors(plain, [0.25] * 4, target), atol=1e-12)
    wrong = api.post("/v1/calibrators/m/calibrate", json={"logits": LOGITS[:5].tolist(), "priors": [0.5, 0.5]})
    assert wrong.status_code == 422 and "priors" in wrong.json()["detail"]


def test_a_fit_s_observations_are_its_own_to_reorder_unless_shared(api):
    """Issue #19: the array a fit loads from the log may be laid out fold by fold in place by the
    core (``calibration.allow_reordering``: views, not copies, of each fold's rows); a worker's
    cached arrays, read by several parts of a fanned-out job, may not."""
    from app.observations.schemas import ObservationQuery
    from calibration.inputs import may_reorder

    assert _append(api, "own", 0, 300).status_code == 201
    observations = api.app.state.service.observations
    index = observations.fit_index("own", ObservationQuery().to_value())
    batch = observations.load(None, index)
    assert may_reorder(batch.values) and batch.values.dtype == np.float64
    np.testing.assert_array_equal(batch.values, LOGITS[:300])
    assert not may_reorder(observations.load(None, index, shared=True).values)


def _append_npz(client, name, values, labels):
    buffer = io.BytesIO()
    np.savez(buffer, logits=values, labels=labels)
    return client.post(f"/v1/calibrators/{name}/observations", content=buffer.getvalue(),
                       headers={"content-type": "application/x-npz"})


def test_a_fit_reads_float32_chunks_as_float32_and_fits_what_float64_fits(api):
    """Chunks stored as float32 are loaded as float32 (no whole float64 copy: the core widens a
    block of rows at a time, exactly), so a fit from them gives what a fit on their float64 values
    gives; a float64 chunk among them makes the whole load float64 (widening is exact)."""
    from app.observations.schemas import ObservationQuery

    narrow = LOGITS.astype(np.float32)
    assert _append_npz(api, "f32", narrow[:300], LABELS[:300]).status_code == 201
    assert _append_npz(api, "f32", narrow[300:], LABELS[300:]).status_code == 201
    observations = api.app.state.service.observations
    batch = observations.load(None, observations.fit_index("f32", ObservationQuery().to_value()))
    assert batch.values.dtype == np.float32
    np.testing.assert_array_equal(batch.values, narrow)
    for method in ("temperature", "ensemble_temperature"):
        fitted = api.post("/v1/calibrators/f32/versions",
                          json={"method": method, "data": {"observations": {}}}).json()
        direct = cal.create(method, {"input": "logits"}).fit(narrow.astype(np.float64), LABELS)
        assert fitted["parameters"]["temperature"] == pytest.approx(direct.temperature_, rel=1e-10)
    assert _append(api, "f32", 0, 10).status_code == 201  # JSON: a float64 chunk
    mixed = observations.load(None, observations.fit_index("f32", ObservationQuery().to_value()))
    assert mixed.values.dtype == np.float64
    np.testing.assert_array_equal(mixed.values[:600], narrow)


def _log(client, prefix: str, n: int, start: int = 0) -> dict:
    """Serve ``n`` rows with ids ``prefix0``...; every row served is handed to the log (rate 1), then
    written (the label path's flush); returns the calibrate answer."""
    ids = [f"{prefix}{i}" for i in range(n)]
    served = client.post("/v1/calibrators/m/calibrate", json={"logits": LOGITS[start:start + n].tolist(), "ids": ids})
    assert served.status_code == 200, served.text
    client.app.state.service.prediction_log.flush()
    return served.json()


def test_a_full_prediction_log_stops_logging_counts_the_rest_and_serving_goes_on(database_url):
    """#34: the log had no per-name cap. Cap 100: 60 rows logged, then 60 more of which the first
    40 fit (exactly: the chunk is cut), then 30: calibrate answers 200 throughout, the log stops at
    100 rows, and the 50 rows not logged are counted in GET .../logging, in /metrics and on the
    dashboard's online page; labels of the dropped rows are `unknown`. Retention deleting the
    first chunk (60 rows) lets logging resume, through the real writer process."""
    from datetime import UTC, datetime

    from sqlalchemy import func, select, update

    from app.prediction_log.rows import PredictionChunkRow
    with TestClient(_app(database_url, max_logged_rows=100)) as client:
        client.post("/v1/calibrators/m/versions", json={"method": "temperature", "logits": LOGITS.tolist(),
                                                        "labels": LABELS.tolist()})
        client.put("/v1/calibrators/m/logging", json={"sample_rate": 1})
        assert _log(client, "a", 60)["logged"] == 60
        assert _log(client, "b", 60, 60)["logged"] == 60  # handed to the log; 40 of them fit
        assert _log(client, "c", 30, 120)["ids"] == [f"c{i}" for i in range(30)]
        with client.app.state.db.read() as session:  # main: 150
            assert session.scalar(select(func.sum(PredictionChunkRow.n_rows))) == 100
        state = client.get("/v1/calibrators/m/logging").json()
        assert (state["logged_rows"], state["full"], state["dropped_rows"]) == (100, True, 50)
        labels = client.post("/v1/calibrators/m/labels", json={"ids": ["b39", "b40", "c0"], "labels": [0, 1, 2]})
        assert labels.json()["statuses"] == ["labelled", "unknown", "unknown"]
        assert 'calibration_log_dropped_rows_total{calibrator="m"} 50.0' in client.get("/metrics").text
        online = client.get("/ui/calibrators/m/online")
        assert online.status_code == 200 and 'id="log-full"' in online.text
        assert "The prediction log is full (100 rows" in online.text and "50 rows not logged so far" in online.text
        summary = client.get("/v1/calibrators/m/observations").json()["prediction_log"]
        assert summary["full"] is True and summary["dropped"] == 50 and summary["logged_rows"] == 100
        # the first chunk ages past the retention (30 days by default) and is deleted: room for 60
        with client.app.state.db.write() as session:
            first = session.scalar(select(func.min(PredictionChunkRow.id)))
            session.execute(update(PredictionChunkRow).where(PredictionChunkRow.id == first)
                            .values(created_at=datetime(2020, 1, 1, tzinfo=UTC)))
        client.app.state.service.prediction_log.apply_retention()
        assert client.get("/v1/calibrators/m/logging").json() == {
            "name": "m", "sample_rate": 1.0, "logged_rows": 40, "max_logged_rows": 100, "full": False,
            "dropped_rows": 50}
        assert _log(client, "d", 30, 150)["logged"] == 30
        state = client.get("/v1/calibrators/m/logging").json()
        assert (state["logged_rows"], state["full"], state["dropped_rows"]) == (70, False, 50)
        assert client.post("/v1/calibrators/m/labels", json={"ids": ["d29"], "labels": [1]}).json()["labelled"] == 1
        online = client.get("/ui/calibrators/m/online").text
        assert 'id="log-full"' not in online and "50 served rows were not logged" in online


@pytest.mark.postgres
def test_two_retention_runs_at_once_take_the_deleted_rows_off_the_count_once(migrated_postgres_url):
    """Two replicas apply retention at the same time (Postgres, READ COMMITTED): the second's
    delete waits for the first's row locks, then finds the chunks gone. Its ``logged_rows``
    decrement must be what it deleted (nothing), not the sum it read before waiting, or the count
    falls below the rows held and the cap CALIBRATION_MAX_LOGGED_ROWS lets that many more in."""
    import threading
    from datetime import UTC, datetime

    from sqlalchemy import func as sqlfunc
    from sqlalchemy import select, text, update
    from sqlalchemy.orm import Session

    from app.prediction_log import store as prediction_log_store
    from app.prediction_log.rows import PredictionChunkRow
    from app.registry.rows import CalibratorRow

    with TestClient(_app(migrated_postgres_url, max_logged_rows=100)) as client:
        client.post("/v1/calibrators/m/versions", json={"method": "temperature", "logits": LOGITS.tolist(),
                                                        "labels": LABELS.tolist()})
        client.put("/v1/calibrators/m/logging", json={"sample_rate": 1})
        assert _log(client, "a", 60)["logged"] == 60
        engine = client.app.state.db.engine
        with Session(engine) as session, session.begin():
            session.execute(update(PredictionChunkRow).values(created_at=datetime(2020, 1, 1, tzinfo=UTC)))
        before = datetime(2021, 1, 1, tzinfo=UTC)
        first = Session(engine)
        prediction_log_store.delete_predictions_before(first, before)  # holds the chunks' row locks

        def second():
            with Session(engine) as session, session.begin():
                prediction_log_store.delete_predictions_before(session, before)

        thread = threading.Thread(target=second)
        thread.start()
        with engine.connect() as watch:  # until the second run waits for the first's locks
            while not watch.execute(text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                         "AND datname = current_database()")).scalar():
                watch.rollback()
                thread.join(0.05)
        first.commit()
        first.close()
        thread.join()
        with Session(engine) as session:
            assert session.scalar(select(CalibratorRow.logged_rows)) == 0  # main: -60
        assert _log(client, "b", 100, 60)["logged"] == 100
        assert _log(client, "c", 60, 160)["logged"] == 60
        with Session(engine) as session:  # the log holds at most its cap (main: 160 of 100)
            held = session.scalar(select(sqlfunc.sum(PredictionChunkRow.n_rows)))
            assert held == 100


def test_a_read_selects_chunks_by_ref(api):
    """``chunk_index`` answers ``ChunkRef`` values: the newest ``last`` rows skip the start of the oldest
    chunk they reach; ``pieces`` cuts a ref by the read budget; a job keeps refs as JSON lists."""
    from app.observations import store as observation_store
    from app.observations.chunks import ChunkRef, pieces, refs_from_json, total_rows
    from app.registry import store

    assert _append(api, "refs", 0, 100).status_code == 201
    assert _append(api, "refs", 100, 150).status_code == 201
    with api.app.state.db.read() as session:
        calibrator_id = store.calibrator_row(session, "refs").id
        every = observation_store.chunk_index(session, calibrator_id, observation_store.Selection())
        first, second = every
        newest = observation_store.chunk_index(session, calibrator_id, observation_store.Selection(last=70))
        inputs, labels = observation_store.load(session, newest)
    assert (first.n_rows, first.skip, first.kind, first.n_classes, second.n_rows) == (100, 0, "logits", 4, 50)
    assert newest == [ChunkRef(first.id, 100, first.dtype, "logits", 4, skip=80), second]
    assert [ref.rows for ref in newest] == [20, 50] and total_rows(newest) == 70
    np.testing.assert_allclose(inputs, LOGITS[80:150], rtol=1e-6)
    np.testing.assert_array_equal(labels, LABELS[80:150])
    assert [(p.skip, p.n_rows) for p in pieces(newest[0], 4 * 8)] == [(80, 88), (88, 96), (96, 100)]
    assert newest[0].as_json() == [first.id, 100, first.dtype, "logits", 4, 80]
    assert refs_from_json([ref.as_json() for ref in newest]) == newest
