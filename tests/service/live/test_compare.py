"""/v1/compare (in the request and as a background job) and fits with method "auto"."""

from __future__ import annotations

import io
import threading
import time

import httpx
import numpy as np
import pytest

import calibration as cal
from tests.helpers import load_split, make_reference_input
from tests.service.support.live import live_server

LOGITS, LABELS = make_reference_input(n=600, k=4, seed=5)
BODY = {"logits": LOGITS.tolist(), "labels": LABELS.tolist(),
        "methods": ["temperature", "isotonic_multiclass", "vector"], "folds": 3, "seed": 2}


def without_times(result: dict) -> dict:
    for row in result["methods"]:
        row["mean"].pop("fit_seconds"), row["std"].pop("fit_seconds")
    return result


def test_compare_returns_the_core_table_and_selection(client):
    response = client.post("/v1/compare", json=BODY)
    assert response.status_code == 200, response.text
    result = response.json()
    core = cal.compare(LOGITS, LABELS, BODY["methods"], folds=3, seed=2)
    assert [m["name"] for m in result["methods"]] == ["temperature", "isotonic_multiclass", "vector"]
    for row, expected in zip(result["methods"], core.results, strict=True):
        assert row["mean"]["nll"] == pytest.approx(expected.mean("nll"), rel=1e-12)
    assert result["selection"]["chosen"]["name"] == cal.select(core).chosen.name
    assert without_times(client.post("/v1/compare", json=BODY).json()) == without_times(result)
    kept = client.post("/v1/compare", json={**BODY, "preserve_accuracy": True}).json()
    assert kept["selection"]["excluded"]["vector"] == "not accuracy-preserving"
    assert client.get("/v1/calibrators").json()["calibrators"] == []  # nothing stored


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"methods": ["nope"]}, "unknown method 'nope'"),
        ({"methods": [{"method": "temperature", "options": {"objective": "x"}}]}, "option 'objective'"),
        ({"folds": 1}, "folds: Input should be greater than or equal to 2"),
        ({"labels": LABELS[:10].tolist()}, "labels has 10 entries"),
        ({"logits": LOGITS[:7].tolist(), "labels": LABELS[:7].tolist(), "folds": 5}, "needs at least 10 samples"),
    ],
)
def test_compare_errors(client, change, detail):
    for prefer in ({}, {"Prefer": "respond-async"}):  # refused before any job is created
        response = client.post("/v1/compare", json={**BODY, **change}, headers=prefer)
        assert response.status_code == 422 and detail in response.json()["detail"], response.text


def test_compare_as_a_job(client):
    response = client.post("/v1/compare", json=BODY, headers={"Prefer": "respond-async"})
    assert response.status_code == 202, response.text
    assert response.headers["Preference-Applied"] == "respond-async"
    location = response.headers["Location"]
    assert location == f"/v1/jobs/{response.json()['id']}"
    for _ in range(600):
        job = client.get(location).json()
        if job["status"] not in ("queued", "running"):
            break
        time.sleep(0.05)
    assert job["status"] == "succeeded" and job["percent"] == 100.0 and job["error"] is None
    assert without_times(job["result"]) == without_times(client.post("/v1/compare", json=BODY).json())
    missing = client.get("/v1/jobs/0123456789abcdef0123456789abcdef")
    assert missing.status_code == 404 and "no job" in missing.json()["detail"]


def test_fit_auto_stores_the_choice_and_its_comparison(client):
    body = {"method": "auto", "options": {"candidates": ["temperature", "vector"], "folds": 3},
            "logits": LOGITS.tolist(), "labels": LABELS.tolist()}
    response = client.post("/v1/calibrators/auto-demo/versions", json=body)
    assert response.status_code == 201, response.text
    version = response.json()
    core = cal.create("auto", body["options"]).fit(LOGITS, LABELS)
    assert version["parameters"]["chosen"] == core.summary()["chosen"]
    comparison = version["report"]["comparison"]
    assert [m["name"] for m in comparison["methods"]] == ["temperature", "vector"]
    assert comparison["selection"]["chosen"]["name"] == core.summary()["chosen"]
    calibrated = client.post("/v1/calibrators/auto-demo/calibrate", json={"logits": LOGITS[:5].tolist()})
    np.testing.assert_allclose(calibrated.json()["probabilities"], core.predict_proba(LOGITS[:5]), rtol=1e-12)
    bad = client.post("/v1/calibrators/auto-demo/versions", json={**body, "options": {"candidates": ["auto"]}})
    assert bad.status_code == 422 and "cannot be a candidate of itself" in bad.json()["detail"]


@pytest.mark.slow
def test_a_long_comparison_does_not_block_other_requests(migrated_sqlite_url):
    """One worker: a comparison of several seconds is in flight while other requests are served,
    and its job reports intermediate progress."""
    kind, x, y = load_split("cifar100_lenet5", "val")
    buffer = io.BytesIO()
    np.savez(buffer, **{kind: x, "labels": y})
    archive = buffer.getvalue()
    # a sync budget no comparison exceeds: the first one runs in its request, as asked
    with live_server(migrated_sqlite_url, migrated=True, env={"CALIBRATION_SYNC_BUDGET_SECONDS": "1e9"}) as base, \
            httpx.Client(base_url=base, timeout=300) as http:
        done = threading.Event()

        def long_compare():
            http.post("/v1/compare", content=archive, headers={"Content-Type": "application/x-npz"})
            done.set()

        thread = threading.Thread(target=long_compare)
        thread.start()
        time.sleep(0.5)
        served = http.post("/v1/metrics", json={"probabilities": [[0.8, 0.2], [0.3, 0.7]], "labels": [0, 1]})
        served_during = not done.is_set()
        thread.join()
        assert served.status_code == 200 and served_during

        job = http.post("/v1/compare", content=archive, headers={"Content-Type": "application/x-npz",
                                                                  "Prefer": "respond-async"}).json()
        seen = set()
        while job["status"] in ("queued", "running"):
            seen.add(job["percent"])
            time.sleep(0.05)
            job = http.get(f"/v1/jobs/{job['id']}").json()
        assert job["status"] == "succeeded" and any(0 < p < 100 for p in seen), seen


def test_a_job_without_a_heartbeat_is_reported_lost(client):
    from datetime import timedelta

    from app.jobs.rows import JobRow
    from app.platform.rows import utcnow

    stale = utcnow() - client.app.state.service.jobs.stale - timedelta(seconds=1)
    with client.app.state.db.write() as session:
        session.add(JobRow(id="0" * 32, kind="compare", status="running", percent=35.0, updated_at=stale))
        session.add(JobRow(id="1" * 32, kind="compare", status="running", percent=35.0, updated_at=utcnow()))
    lost = client.get(f"/v1/jobs/{'0' * 32}").json()
    assert lost["status"] == "failed" and lost["percent"] == 35.0
    assert lost["error"]["title"] == "Worker lost" and "no heartbeat for 0:05:00" in lost["error"]["detail"]
    assert client.get(f"/v1/jobs/{'1' * 32}").json()["status"] == "running"
