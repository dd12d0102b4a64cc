"""Drift alarms told to a webhook, against a real HTTP receiver (``http.server`` in a thread): each
new alarm gets one delivery (a row per alarm and URL, written with the alarm) whichever path raised
it, delivered by the scheduler with a total deadline per attempt, bounded retries with backoff,
and a ``Webhook-Id`` the receiver can deduplicate on."""

from __future__ import annotations

import time

import numpy as np
from starlette.testclient import TestClient

from app.main import create_app
from app.promotion.scheduler import Scheduler
from app.settings import Settings, get_settings
from tests.helpers import load_split
from tests.service.support.webhooks import Receiver

NAME = "drifty"


def _ok(response, status: int = 200) -> dict:
    assert response.status_code == status, response.text
    return response.json()


def _app(database_url: str, monkeypatch, url: str, **env) -> TestClient:
    """The service with its own scheduler off (the test ticks one), the webhook at ``url``, and the
    other ``CALIBRATION_*`` settings in ``env`` (also read by the job processes)."""
    for key, value in {"ALARM_WEBHOOK_URL": url, "SCHEDULE_SECONDS": "0", "LOG_WRITER": "thread",
                       "LOG_FLUSH_SECONDS": "0.2", "JOB_PROCESSES": "1", **env}.items():
        monkeypatch.setenv(f"CALIBRATION_{key}", value)
    get_settings.cache_clear()
    return TestClient(create_app(Settings(database_url=database_url, job_engine="embedded")))


def _drift(client: TestClient) -> None:
    """Over-confident predictions (CIFAR-100 logits scaled by 4 after a fit on the plain ones), served
    with logging on and labelled: enough for a drift monitor to alarm."""
    _, probabilities, labels = load_split("cifar100_densenet-bc-100", "val")
    val = np.log(np.maximum(probabilities.astype(np.float64), 1e-12))
    _ok(client.post(f"/v1/calibrators/{NAME}/versions", json={"method": "temperature", "logits": val[:2000].tolist(),
                                                              "labels": labels[:2000].tolist()}), 201)
    _ok(client.put(f"/v1/calibrators/{NAME}/logging", json={"sample_rate": 1}))
    ids = _ok(client.post(f"/v1/calibrators/{NAME}/calibrate", json={"logits": (val[2000:5000] * 4).tolist()}))["ids"]
    _ok(client.post(f"/v1/calibrators/{NAME}/labels", json={"ids": ids, "labels": labels[2000:5000].tolist()}))


def _wait_for_alarms_jobs(client: TestClient) -> list[dict]:
    """The ``alarms`` jobs, once none is queued or running."""
    deadline = time.monotonic() + 120
    while True:
        jobs = [j for j in _ok(client.get("/v1/jobs"))["jobs"] if j["kind"] == "alarms"]
        if jobs and all(j["status"] not in ("queued", "running") for j in jobs):
            return jobs
        assert time.monotonic() < deadline, jobs
        time.sleep(0.1)


def _deliveries(client: TestClient) -> list[dict]:
    return _ok(client.get(f"/v1/calibrators/{NAME}/alarms/deliveries"))["deliveries"]


def test_an_alarm_raised_by_evaluate_reaches_the_webhook_once(database_url, monkeypatch, receiver):
    hook = receiver([204])
    with _app(database_url, monkeypatch, hook.url) as client:
        _drift(client)
        raised = _ok(client.post(f"/v1/calibrators/{NAME}/alarms/evaluate"))["new_alarms"]
        assert raised
        scheduler = Scheduler(client.app.state.service, 0)
        for _ in range(3):  # the tick's alarms job finds no new alarm; the delivery is the tick's too
            scheduler.tick()
            _wait_for_alarms_jobs(client)
        more_data = _ok(client.post(f"/v1/calibrators/{NAME}/calibrate", json={"logits": [[0.0] * 100]}))["ids"]
        _ok(client.post(f"/v1/calibrators/{NAME}/labels", json={"ids": more_data, "labels": [3]}))
        scheduler.tick()  # data arrived: another alarms job
        jobs = _wait_for_alarms_jobs(client)
        scheduler.tick()
        listed = client.get(f"/v1/calibrators/{NAME}/alarms/deliveries")
        page = client.get(f"/ui/calibrators/{NAME}/online")
    assert len(hook.posts) == len(raised), "each alarm raised by evaluate reaches the receiver exactly once"
    deliveries = _ok(listed)["deliveries"]
    assert all(j["status"] == "succeeded" for j in jobs), [j.get("error") for j in jobs]  # results are JSON
    assert page.status_code == 200 and all(f'data-delivery="{d["id"]}" data-state="delivered"' in page.text
                                           for d in deliveries)
    ids = {headers["Webhook-Id"] for headers, *_ in hook.posts}
    assert ids == {body["id"] for _, body, *_ in hook.posts} == {d["id"] for d in deliveries}
    assert sorted((b["alarm"]["version"], b["alarm"]["signal"]) for _, b, *_ in hook.posts) == sorted(
        (a["version"], a["signal"]) for a in raised)
    assert all(d["state"] == "delivered" and d["attempts"] == 1 and d["last_error"] is None for d in deliveries)
    assert all(b["calibrator"] == NAME and f"drift alarm on {NAME}" in b["text"]
               and b["alarm"]["e_value"] >= 1 / b["alarm"]["alpha"] for _, b, *_ in hook.posts)


def test_a_trickling_receiver_is_cut_off_at_the_deadline_and_retried_until_failed(sqlite_url, monkeypatch,
                                                                                   receiver):
    from app.platform.migrate import upgrade

    upgrade(sqlite_url)
    deadline, attempts = 1.5, 2
    slack = 2 * Receiver.TRICKLE_SECONDS + 1.0  # the receiver notices the close at its next writes
    hook = receiver(["trickle"])  # 43 bytes at 2 a second: 21 s without a total deadline
    with _app(sqlite_url, monkeypatch, hook.url, WEBHOOK_DEADLINE_SECONDS=str(deadline),
              WEBHOOK_ATTEMPTS=str(attempts), WEBHOOK_BACKOFF_SECONDS="0.2") as client:
        _drift(client)
        scheduler = Scheduler(client.app.state.service, 0)
        scheduler.tick()  # data arrived: an alarms job, which raises the alarms
        _wait_for_alarms_jobs(client)
        held = hook.held()  # of any POST the job itself made
        assert all(seconds <= deadline + slack for seconds in held), f"a POST held the job for {max(held):.1f} s"
        ticks = []
        limit = time.monotonic() + 120
        while not hook.posts or any(d["state"] == "pending" for d in _deliveries(client)):
            started = time.monotonic()
            scheduler.tick()
            ticks.append(time.monotonic() - started)
            assert time.monotonic() < limit, (hook.posts, ticks)
            time.sleep(0.1)
        deliveries = _deliveries(client)
        while any(ended is None for *_, ended in hook.posts):  # a handler still writing
            time.sleep(0.1)
    durations = hook.held()
    assert deliveries and all(d["state"] == "failed" and d["attempts"] == attempts for d in deliveries), deliveries
    assert all("deadline" in d["last_error"] for d in deliveries), deliveries
    assert len(hook.posts) == attempts * len(deliveries)
    assert max(durations) <= deadline + slack, f"a delivery held for {max(durations):.1f} s (deadline {deadline} s)"
    assert max(ticks) <= len(deliveries) * (deadline + 1.0) + 5.0, ticks  # each attempt ended at its deadline
    for delivery in deliveries:
        posts = [(h, b, started) for h, b, started, _ in hook.posts if b["id"] == delivery["id"]]
        assert len(posts) == attempts and {h["Webhook-Id"] for h, _, _ in posts} == {delivery["id"]}
        # the retry began after the first attempt's deadline and the backoff (less a POST's own ms)
        assert posts[1][2] - posts[0][2] >= deadline + 0.2 - 0.05, posts


def test_a_receiver_that_fails_twice_gets_the_alarm_on_the_third_attempt(database_url, monkeypatch, receiver):
    hook = receiver([500, 503, 204])
    with _app(database_url, monkeypatch, hook.url, WEBHOOK_ATTEMPTS="5", WEBHOOK_BACKOFF_SECONDS="0.1") as client:
        _drift(client)
        raised = _ok(client.post(f"/v1/calibrators/{NAME}/alarms/evaluate", params={"alpha": 0.01}))["new_alarms"]
        scheduler = Scheduler(client.app.state.service, 0)
        limit = time.monotonic() + 60
        while len(hook.posts) < 3 or any(d["state"] == "pending" for d in _deliveries(client)):
            scheduler.tick()
            assert time.monotonic() < limit, f"{len(hook.posts)} POSTs reached the receiver in 60 s"
            time.sleep(0.1)
        for _ in range(3):
            scheduler.tick()
        deliveries = _deliveries(client)
    assert raised and len(deliveries) == len(raised)
    assert all(d["attempts"] == 3 and d["state"] == "delivered" for d in deliveries)
    for delivery in deliveries:  # 500, 503, then 204: three POSTs of the same id, none after
        assert [h["Webhook-Id"] for h, b, *_ in hook.posts if b["id"] == delivery["id"]] == [delivery["id"]] * 3
        began = [started for _, b, started, _ in hook.posts if b["id"] == delivery["id"]]
        gaps = np.diff(began)  # at least the backoff, doubled: 0.1 s, then 0.2 s (less a POST's own ms)
        assert gaps[0] >= 0.1 - 0.05 and gaps[1] >= 0.2 - 0.05, gaps
    assert len(hook.posts) == 3 * len(deliveries)
