"""Online Platt scaling as a served calibrator (SQLite and Postgres): it is fitted like any method,
each batch of labels that arrives later updates its latest version into the next one, in the order
the labels were posted, and what it serves and stores equals the core's online updates replayed on
the same rows. On a real stream whose confidence drifts, the updated versions forecast better than
the version first fitted."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from fastapi.testclient import TestClient

import calibration as cal
from app.settings import Settings
from app.wiring import create_app
from calibration.online import OnlinePlattScaling
from tests.helpers import load_split

FIT = 1000


def _stream() -> tuple[np.ndarray, np.ndarray]:
    """Binary event "the top-1 prediction is correct" of CIFAR-10 ResNet-50 test outputs, scored by
    the log-odds of the top-1 confidence; the logits grow 2.5x over-confident after the fit rows."""
    _, logits, labels = load_split("cifar10_resnet50_cross_entropy", "test")
    scale = np.where(np.arange(len(labels)) < FIT, 1.0, 2.5)
    log_p = cal.log_softmax(logits * scale[:, None])
    top = log_p.argmax(axis=1)
    confidence = log_p[np.arange(len(labels)), top]
    scores = confidence - np.log(-np.expm1(np.minimum(confidence, -1e-15)))
    return scores, (top == labels).astype(np.int64)


@pytest.fixture
def api(database_url):
    app = create_app(Settings(database_url=database_url, job_engine="embedded", log_flush_seconds=0.05,
                              log_level="warning"))
    with TestClient(app) as client:
        yield client


def _ok(response, status: int = 200) -> dict:
    assert response.status_code == status, response.text
    return response.json()


def _serve(api, scores: np.ndarray, start: int, stop: int) -> np.ndarray:
    body = _ok(api.post("/v1/calibrators/ops/calibrate",
                        json={"scores": scores[start:stop].tolist(), "ids": [f"r{i}" for i in range(start, stop)]}))
    assert body["logged"] == stop - start
    return np.asarray(body["probabilities"])[:, 1]


def test_labels_update_the_latest_version_and_equal_the_core_s_replay(api):
    scores, labels = _stream()
    first = _ok(api.post("/v1/calibrators/ops/versions", json={
        "method": "online_platt", "options": {"input": "scores"}, "scores": scores[:FIT].tolist(),
        "labels": labels[:FIT].tolist()}), 201)
    _ok(api.put("/v1/calibrators/ops/logging", json={"sample_rate": 1.0}))
    core = OnlinePlattScaling().update(scores[:FIT], labels[:FIT])
    assert (first["parameters"]["slope"], first["parameters"]["intercept"]) == core.coef_

    rng = np.random.default_rng(7)
    served, fixed, version, start = [], [], first["version"], FIT
    for size in (400, 250, 600, 350):
        stop = start + size
        probabilities = _serve(api, scores, start, stop)
        np.testing.assert_array_equal(probabilities, core.predict_proba(scores[start:stop]))  # the latest serves
        fixed.append(OnlinePlattScaling().update(scores[:FIT], labels[:FIT]).predict_proba(scores[start:stop]))
        order = start + rng.permutation(size)  # labels come back shuffled, and in two requests
        for part in np.array_split(order, 2):
            answer = _ok(api.post("/v1/calibrators/ops/labels",
                                  json={"ids": [f"r{i}" for i in part], "labels": labels[part].tolist()}))
            assert answer["labelled"] == len(part) and answer["online_version"] == version + 1
            forecasts = core.predict_update(scores[part], labels[part])
            version += 1
            stored = _ok(api.get(f"/v1/calibrators/ops/versions/{version}"))
            assert (stored["parameters"]["slope"], stored["parameters"]["intercept"]) == core.coef_
            update = stored["report"]["online_update"]
            assert update["parent_version"] == version - 1 and update["rows"] == len(part)
            probs = np.stack([1 - forecasts, forecasts], axis=1)
            assert update["prequential"]["nll"] == pytest.approx(cal.nll(probs, labels[part]), rel=1e-12)
        served.append(probabilities)
        start = stop

    assert _ok(api.get("/v1/calibrators/ops"))["latest_version"] == version == first["version"] + 8
    rows = slice(FIT, start)
    online = np.concatenate(served)
    held = np.concatenate(fixed)
    # after the drift the fixed fit is over-confident; the online versions that served have caught up
    assert cal.nll(np.stack([1 - online, online], 1), labels[rows]) < \
        0.9 * cal.nll(np.stack([1 - held, held], 1), labels[rows])


def test_uploads_update_too_and_other_methods_are_left_alone(api):
    scores, labels = _stream()
    _ok(api.post("/v1/calibrators/ops/versions", json={
        "method": "online_platt", "options": {"input": "scores", "calibeating": "tracking", "n_bins": 5},
        "scores": scores[:FIT].tolist(), "labels": labels[:FIT].tolist()}), 201)
    appended = _ok(api.post("/v1/calibrators/ops/observations", json={
        "scores": scores[FIT:FIT + 300].tolist(), "labels": labels[FIT:FIT + 300].tolist()}), 201)
    assert appended["online_version"] == 2
    model = cal.create("online_platt", {"input": "scores", "calibeating": "tracking", "n_bins": 5})
    model.fit(scores[:FIT], labels[:FIT])
    model.update_batch(cal.validate_inputs(scores[FIT:FIT + 300], "scores"), labels[FIT:FIT + 300])
    served = _ok(api.post("/v1/calibrators/ops/calibrate", json={"scores": scores[-50:].tolist()}))
    np.testing.assert_array_equal(np.asarray(served["probabilities"]), model.predict_proba(scores[-50:]))

    _ok(api.post("/v1/calibrators/plain/versions", json={
        "method": "platt", "options": {"input": "scores"}, "scores": scores[:FIT].tolist(),
        "labels": labels[:FIT].tolist()}), 201)
    plain = _ok(api.post("/v1/calibrators/plain/observations", json={
        "scores": scores[FIT:FIT + 300].tolist(), "labels": labels[FIT:FIT + 300].tolist()}), 201)
    assert plain["online_version"] is None
    assert _ok(api.get("/v1/calibrators/plain"))["latest_version"] == 1


def test_concurrent_label_batches_are_applied_one_after_the_other(api):
    scores, labels = _stream()
    _ok(api.post("/v1/calibrators/ops/versions", json={
        "method": "online_platt", "options": {"input": "scores"}, "scores": scores[:FIT].tolist(),
        "labels": labels[:FIT].tolist()}), 201)
    _ok(api.put("/v1/calibrators/ops/logging", json={"sample_rate": 1.0}))
    _serve(api, scores, FIT, FIT + 700)
    parts = {300: np.arange(FIT, FIT + 300), 400: np.arange(FIT + 300, FIT + 700)}  # sizes tell them apart
    answers = []

    def post(part):
        answers.append(api.post("/v1/calibrators/ops/labels",
                                json={"ids": [f"r{i}" for i in part], "labels": labels[part].tolist()}))

    threads = [threading.Thread(target=post, args=(part,)) for part in parts.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(_ok(a)["online_version"] for a in answers) == [2, 3]
    first_rows = _ok(api.get("/v1/calibrators/ops/versions/2"))["report"]["online_update"]["rows"]
    core = OnlinePlattScaling().update(scores[:FIT], labels[:FIT])
    for size in (first_rows, 700 - first_rows):
        core.update(scores[parts[size]], labels[parts[size]])
    last = _ok(api.get("/v1/calibrators/ops/versions/3"))
    assert (last["parameters"]["slope"], last["parameters"]["intercept"]) == core.coef_
    assert last["parameters"]["n_updates"] == FIT + 700 and last["n_samples"] == FIT + 700


def test_an_online_fit_of_multiclass_inputs_is_refused(api):
    _, logits, labels = load_split("cifar10_resnet50_cross_entropy", "val")
    refused = api.post("/v1/calibrators/ops/versions", json={
        "method": "online_platt", "logits": logits[:100].tolist(), "labels": labels[:100].tolist()})
    assert refused.status_code == 422 and "binary only" in refused.json()["detail"]


def test_an_online_temperature_follows_labels_of_a_drifting_multiclass_stream(api):
    _, logits, labels = load_split("cifar10_resnet50_cross_entropy", "val")
    logits = logits * np.where(np.arange(len(labels)) < FIT, 1.0, 2.0)[:, None]  # over-confident after the fit
    first = _ok(api.post("/v1/calibrators/ots/versions", json={
        "method": "online_temperature", "logits": logits[:FIT].tolist(), "labels": labels[:FIT].tolist()}), 201)
    _ok(api.put("/v1/calibrators/ots/logging", json={"sample_rate": 1.0}))
    core = cal.create("online_temperature").fit(logits[:FIT], labels[:FIT])
    assert first["parameters"] == core.summary()
    served, fixed = [], cal.from_dict(core.to_dict())
    for start in range(FIT, FIT + 2000, 500):
        rows = np.arange(start, start + 500)
        body = _ok(api.post("/v1/calibrators/ots/calibrate",
                            json={"logits": logits[rows].tolist(), "ids": [f"m{i}" for i in rows]}))
        probabilities = np.asarray(body["probabilities"])
        np.testing.assert_allclose(probabilities, core.predict_proba(logits[rows]), rtol=1e-12, atol=1e-300)
        served.append(probabilities)
        answer = _ok(api.post("/v1/calibrators/ots/labels",
                              json={"ids": [f"m{i}" for i in rows[::-1]], "labels": labels[rows[::-1]].tolist()}))
        core.update_batch(cal.validate_inputs(logits[rows[::-1]], "logits"), labels[rows[::-1]])
        stored = _ok(api.get(f"/v1/calibrators/ots/versions/{answer['online_version']}"))
        assert stored["parameters"] == core.summary()
    rows = slice(FIT, FIT + 2000)
    held = fixed.predict_proba(logits[rows])
    assert cal.nll(np.concatenate(served), labels[rows]) < 0.9 * cal.nll(held, labels[rows])


def test_small_label_batches_accumulate_until_enough_rows_arrived(database_url):
    app = create_app(Settings(database_url=database_url, job_engine="embedded", log_flush_seconds=0.05,
                              log_level="warning", online_update_rows=500))
    scores, labels = _stream()
    with TestClient(app) as api:
        fitted = _ok(api.post("/v1/calibrators/ops/versions", json={
            "method": "online_platt", "options": {"input": "scores"}, "scores": scores[:FIT].tolist(),
            "labels": labels[:FIT].tolist()}), 201)
        assert fitted["report"]["online_update"] == {"through_chunk": 0}
        _ok(api.put("/v1/calibrators/ops/logging", json={"sample_rate": 1.0}))
        _serve(api, scores, FIT, FIT + 400)
        answers = [_ok(api.post("/v1/calibrators/ops/labels", json={
            "ids": [f"r{i}" for i in range(start, start + 200)], "labels": labels[start:start + 200].tolist()}))
            for start in (FIT, FIT + 200)]
        upload = _ok(api.post("/v1/calibrators/ops/observations", json={
            "scores": scores[FIT + 400:FIT + 550].tolist(), "labels": labels[FIT + 400:FIT + 550].tolist()}), 201)
        assert [a["online_version"] for a in answers] == [None, None] and upload["online_version"] == 2
        stored = _ok(api.get("/v1/calibrators/ops/versions/2"))
        assert stored["report"]["online_update"]["rows"] == 550
        assert stored["report"]["online_update"]["chunks"] == 3
        core = OnlinePlattScaling().update(scores[:FIT + 550], labels[:FIT + 550])
        assert (stored["parameters"]["slope"], stored["parameters"]["intercept"]) == core.coef_
        # the rows just applied are not applied again: the next batch starts after them
        more = _ok(api.post("/v1/calibrators/ops/observations", json={
            "scores": scores[FIT + 550:FIT + 1050].tolist(), "labels": labels[FIT + 550:FIT + 1050].tolist()}), 201)
        assert more["online_version"] == 3
        core.update(scores[FIT + 550:FIT + 1050], labels[FIT + 550:FIT + 1050])
        last = _ok(api.get("/v1/calibrators/ops/versions/3"))["parameters"]
        assert (last["slope"], last["intercept"], last["n_updates"]) == (*core.coef_, FIT + 1050)
