"""Prediction sets online on a real server (uvicorn in a subprocess, ``tests/service/support/live.py``) run
as deployed, the scheduler on: fit a calibrator, attach an adaptive (DtACI) set predictor, serve
sets with logging and prediction ids, post the labels late and shuffled (3000 at once, then after
each batch of 500), and let the scheduled
``alarms`` jobs (nobody calls evaluate) bring the coverage over time, the adaptive threshold and
the coverage alarm up to date; the alarm reaches a webhook receiver once.

Data: CIFAR-10 LeNet-5 (../shared/data): temperature scaling on validation rows 0-2499, the set
predictor (LAC, coverage 0.9) on rows 2500-4999; 3000 test rows as served, then 3000 with the
model's logits doubled (``p -> p^2`` renormalised)."""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest

from tests.helpers import load_split
from tests.service.support.live import live_server, queue_report

NAME = "lenet-live"
SIGNAL = "coverage@0.9"


def _ok(response, status: int = 200) -> dict:
    assert response.status_code == status, response.text
    return response.json()


def _doubled(p: np.ndarray) -> np.ndarray:
    q = p.astype(np.float64) ** 2
    return q / q.sum(axis=1, keepdims=True)


def _wait(client, predictor_id: int, rows: int, report, seconds: float = 90.0) -> tuple[dict, dict]:
    """Poll until the scheduled evaluation applied ``rows`` labelled rows to the coverage monitor and
    the adaptive state; their views. ``report()``: what the queue and the log say, if in vain."""
    deadline = time.monotonic() + seconds
    while True:
        alarms = _ok(client.get(f"/v1/calibrators/{NAME}/alarms"))
        monitor = next((m for m in alarms["monitors"] if m["signal"] == SIGNAL), None)
        (state,) = _ok(client.get(f"/v1/calibrators/{NAME}/versions/1/set-predictors/{predictor_id}"))["adaptive"]
        if monitor is not None and monitor["n_rows"] == rows and state["n_rows"] == rows:
            return monitor, state
        assert time.monotonic() < deadline, f"{monitor}\n{state}\n{report()}"
        time.sleep(0.5)


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_sets_served_labels_late_coverage_adaptive_threshold_and_alarm(kind, request, tmp_path, receiver):
    _, val, val_labels = load_split("cifar10_lenet5", "val")
    _, test, test_labels = load_split("cifar10_lenet5", "test")
    hook = receiver([200])
    url = request.getfixturevalue(f"migrated_{kind}_url")
    rng = np.random.default_rng(5)
    env = {"CALIBRATION_LOG_FLUSH_SECONDS": "0.2", "CALIBRATION_ALARM_WEBHOOK_URL": hook.url}
    with live_server(url, env=env, log_file=tmp_path / "server.log", worker=kind == "postgres",
                     migrated=True) as base, \
            httpx.Client(base_url=base, timeout=120) as client:
        _ok(client.post(f"/v1/calibrators/{NAME}/versions", json={
            "method": "temperature", "probabilities": val[:2500].tolist(), "labels": val_labels[:2500].tolist()}), 201)
        predictor = _ok(client.post(f"/v1/calibrators/{NAME}/versions/1/set-predictors", json={
            "score": "lac", "coverage": [0.9], "adaptive": "dtaci", "probabilities": val[2500:].tolist(),
            "labels": val_labels[2500:].tolist()}), 201)
        _ok(client.put(f"/v1/calibrators/{NAME}/logging", json={"sample_rate": 1.0}))
        served: dict[str, set] = {}
        pending: list[str] = []
        for start in range(0, 6000, 500):
            probs = test[start % 5000:start % 5000 + 500]
            probs = _doubled(probs) if start >= 3000 else probs
            ids = [f"q{start + i}" for i in range(len(probs))]
            body = _ok(client.post(f"/v1/calibrators/{NAME}/calibrate", json={
                "probabilities": probs.tolist(), "ids": ids, "outputs": ["probabilities", "set"], "coverage": 0.9}))
            assert body["ids"] == ids and body["logged"] == len(ids) and body["set_predictor"] == predictor["id"]
            served |= {pid: set(members) for pid, members in zip(ids, body["set"], strict=True)}
            pending += ids
            if start >= 2500:  # labels arrive later, shuffled: the first 3000 at once, then after each batch
                pending = [pending[i] for i in rng.permutation(len(pending))]
                labels = [int(test_labels[int(pid[1:]) % 5000]) for pid in pending]
                assert _ok(client.post(f"/v1/calibrators/{NAME}/labels", json={"ids": pending, "labels": labels}))[
                    "labelled"] == len(pending)
                pending = []
                monitor, state = _wait(client, predictor["id"], start + 500,
                                           lambda: queue_report(url, tmp_path / "server.log"))
                if start == 2500:
                    assert not monitor["alarm"] and abs(state["observed_coverage"] - 0.9) < 0.03
        assert monitor["alarm"] and 3000 < monitor["alarm_rows"] <= 6000
        assert state["method"] == "dtaci" and state["level"] < 0.1  # wider sets after the shift
        quality = _ok(client.get(f"/v1/calibrators/{NAME}/quality", params={"window": "3000", "bootstrap": 0}))
        before, after = (w["coverage"]["0.9"] for w in quality["windows"])
        assert before["coverage"]["low"] <= 0.9 <= before["coverage"]["high"] + 0.02
        assert after["coverage"]["high"] < 0.88 and after["mean_set_size"] < before["mean_set_size"]
        hits = [test_labels[int(pid[1:]) % 5000] in members for pid, members in served.items()]
        assert np.mean(hits[3000:]) > after["coverage"]["high"]  # the adaptive sets served after the shift
        deadline = time.monotonic() + 30
        while not any(body["alarm"]["signal"] == SIGNAL for _, body, *_ in hook.posts):
            assert time.monotonic() < deadline, hook.posts
            time.sleep(0.5)
        time.sleep(2)  # a few more scheduler ticks: still one delivery of it
        delivered = [body for _, body, *_ in hook.posts if body["alarm"]["signal"] == SIGNAL]
        assert len(delivered) == 1 and delivered[0]["alarm"]["version"] == 1
        assert delivered[0]["type"] == "calibration.coverage_alarm"
        assert delivered[0]["text"].startswith(f"calibration coverage alarm on {NAME}: version 1 ({SIGNAL}")
