"""The online loop, part 1, on a real server (uvicorn in a subprocess) on SQLite and Postgres:
predictions served with logging on through /v1 (JSON and .npy) and /v2, a promotion half-way,
labels posted later in a shuffled order, and fits on the stored observations."""

from __future__ import annotations

import http.server
import io
import json
import threading
import time

import httpx
import numpy as np
import pytest

import calibration as cal
from tests.helpers import load_split
from tests.service.support.databases import copy_sqlite_database
from tests.service.support.live import live_server

NAME = "resnet"
BATCH = 500


def _ok(response: httpx.Response, status: int = 200) -> dict:
    assert response.status_code == status, response.text
    return response.json()


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _serve(client: httpx.Client, logits: np.ndarray, start: int, route: str) -> list[str]:
    """Calibrate rows ``start:start+BATCH`` on one of four routes; returns their prediction ids."""
    rows = logits[start:start + BATCH]
    if route == "v1-json-ids":
        ids = [f"p{start + i}" for i in range(len(rows))]
        body = _ok(client.post(f"/v1/calibrators/{NAME}@production/calibrate", json={"logits": rows.tolist(),
                                                                                     "ids": ids}))
        assert body["ids"] == ids and body["logged"] == len(rows)
        return ids
    if route == "v1-json-generated":
        body = _ok(client.post(f"/v1/calibrators/{NAME}@production/calibrate", json={"logits": rows.tolist()}))
        assert len(set(body["ids"])) == len(rows)
        return body["ids"]
    if route == "v1-npy-header":
        ids = [f"p{start + i}" for i in range(len(rows))]
        response = client.post(f"/v1/calibrators/{NAME}@production/calibrate", content=_npy(rows),
                               headers={"content-type": "application/x-npy", "accept": "application/x-npy",
                                        "prediction-ids": ",".join(ids)})
        assert response.status_code == 200, response.text
        assert response.headers["prediction-logged"] == str(len(rows))
        return ids
    # /v2, unversioned: the latest version, which the promotion also changes
    ids = [f"p{start + i}" for i in range(len(rows))]
    request = {"inputs": [{"name": "logits", "shape": list(rows.shape), "datatype": "FP32",
                           "data": rows.ravel().tolist()}], "parameters": {"ids": ids}}
    body = _ok(client.post(f"/v2/models/{NAME}/infer", json=request))
    assert body["parameters"] == {"ids": ids, "logged": len(rows)}
    return ids


@pytest.fixture(scope="module")
def served(module_database_url, tmp_path_factory):
    """One server per database for the two tests below (the scheduler's tests start their own):
    each uses calibrator names of its own."""
    url = module_database_url
    env = {"CALIBRATION_LOG_FLUSH_SECONDS": "0.2", "CALIBRATION_MAX_BODY_BYTES": str(16 << 20)}
    with live_server(url, env=env, log_file=tmp_path_factory.mktemp("log") / "server.log", migrated=True) as base:
        yield base


def test_logged_predictions_labelled_later_carry_their_serving_version(served):
    _, val, val_labels = load_split("cifar10_resnet50_cross_entropy", "val")
    _, test, test_labels = load_split("cifar10_resnet50_cross_entropy", "test")  # 10000 rows to serve
    with httpx.Client(base_url=served, timeout=120) as client:
        _ok(client.post(f"/v1/calibrators/{NAME}/versions",
                        json={"method": "temperature", "logits": val[:2500].tolist(),
                              "labels": val_labels[:2500].tolist()}), 201)
        _ok(client.put(f"/v1/calibrators/{NAME}/aliases/production", json={"version": 1}))
        _ok(client.put(f"/v1/calibrators/{NAME}/logging", json={"sample_rate": 1.0}))
        routes = ["v1-json-ids", "v1-json-generated", "v1-npy-header", "v2"]
        served: dict[str, tuple[int, int]] = {}  # prediction id -> (row, version that served it)
        for position, start in enumerate(range(0, len(test), BATCH)):
            if start == len(test) // 2:  # promotion half-way: a new version, the alias moved to it
                _ok(client.post(f"/v1/calibrators/{NAME}/versions",
                                json={"method": "temperature", "logits": val[2500:].tolist(),
                                      "labels": val_labels[2500:].tolist()}), 201)
                _ok(client.put(f"/v1/calibrators/{NAME}/aliases/production", json={"version": 2}))
            version = 1 if start < len(test) // 2 else 2
            for offset, pid in enumerate(_serve(client, test, start, routes[position % len(routes)])):
                served[pid] = (start + offset, version)
        assert len(served) == len(test)

        # labels arrive later, shuffled, over several requests; some twice, some never logged
        order = np.random.default_rng(7).permutation(list(served))
        counts = {"labelled": 0}
        for part in np.array_split(order, 7):
            ids = part.tolist()
            body = _ok(client.post(f"/v1/calibrators/{NAME}/labels",
                                   json={"ids": [*ids, "never-served"],
                                         "labels": [int(test_labels[served[i][0]]) for i in ids] + [0]}))
            assert body["statuses"] == ["labelled"] * len(ids) + ["unknown"]
            counts["labelled"] += body["labelled"]
        again = _ok(client.post(f"/v1/calibrators/{NAME}/labels", json={"ids": [order[0]], "labels": [0]}))
        assert again["statuses"] == ["already_labelled"] and again["labelled"] == 0
        assert counts["labelled"] == len(test)

        summary = _ok(client.get(f"/v1/calibrators/{NAME}/observations"))
        by_version = {str(v): sum(1 for _, w in served.values() if w == v) for v in (1, 2)}
        assert summary["by_version"] == by_version == {"1": 5000, "2": 5000}
        assert summary["by_source"] == {"feedback": 10000}
        assert summary["class_counts"] == np.bincount(test_labels, minlength=10).tolist()
        assert summary["prediction_log"] == {"sample_rate": 1.0, "logged": 10000, "labelled": 10000,
                                             "logged_rows": 10000, "dropped": 0, "full": False}

        # every observation carries the version that served it: a fit on version v's feedback is
        # the fit on exactly the rows v served (in another order: equal to rounding)
        for version in (1, 2):
            rows = sorted(row for row, v in served.values() if v == version)
            stored = _ok(client.post(f"/v1/calibrators/{NAME}-check/versions",
                                     json={"method": "temperature", "data": {"observations": {"version": version}}}),
                         404)  # the observations belong to NAME, not to another name
            assert "no calibrator" in stored["detail"]
            fitted = _ok(client.post(f"/v1/calibrators/{NAME}/versions",
                                     json={"method": "temperature",
                                           "data": {"observations": {"version": version, "source": "feedback"}}}),
                         201)
            direct = cal.create("temperature").fit(test[rows].astype(np.float64), test_labels[rows])
            assert fitted["n_samples"] == 5000
            assert fitted["parameters"]["temperature"] == pytest.approx(direct.temperature_, rel=1e-9)


def test_fit_on_uploaded_observations_equals_the_inline_fit(served):
    """Appended in chunks (.npz float32 and JSON), then fitted from the log: byte-identical
    parameters to the same arrays sent inline; a retried append with its Idempotency-Key counts once."""
    _, val, labels = load_split("cifar10_resnet50_cross_entropy", "val")
    with httpx.Client(base_url=served, timeout=120) as client:
        for number, start in enumerate(range(0, len(val), 1000)):
            body = _npz(logits=val[start:start + 1000], labels=labels[start:start + 1000])
            headers = {"content-type": "application/x-npz", "idempotency-key": f"chunk-{number}"}
            first = _ok(client.post("/v1/calibrators/up/observations", content=body, headers=headers), 201)
            retried = client.post("/v1/calibrators/up/observations", content=body, headers=headers)
            assert retried.status_code == 201 and retried.headers["idempotent-replayed"] == "true"
            assert retried.json() == first
        assert _ok(client.get("/v1/calibrators/up/observations"))["total_rows"] == len(val)
        for method in ("temperature", "ensemble_temperature"):
            stored = _ok(client.post("/v1/calibrators/up/versions",
                                     json={"method": method, "data": {"observations": {}}}), 201)
            inline = _ok(client.post("/v1/calibrators/inline/versions",
                                     content=_npz(logits=val, labels=labels),
                                     params={"method": method}, headers={"content-type": "application/x-npz"}), 201)
            assert json.dumps(stored["parameters"], sort_keys=True) == json.dumps(inline["parameters"], sort_keys=True)
            assert stored["n_samples"] == inline["n_samples"] == len(val)
        # the newest 1500 rows: the last chunk and half of the one before, in order
        last = _ok(client.post("/v1/calibrators/up/versions",
                               json={"method": "temperature", "data": {"observations": {"last": 1500}}}), 201)
        tail = cal.create("temperature").fit(val[-1500:].astype(np.float64), labels[-1500:])
        assert last["n_samples"] == 1500
        assert last["parameters"]["temperature"] == tail.temperature_


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_refit_policy_fires_on_its_own_once_across_two_processes(kind, request, tmp_path):
    """With CALIBRATION_SCHEDULE_SECONDS each API process checks the refit policies; two processes
    checking the same policy submit one refit job when its trigger fires, and the refit stores a
    version fitted on the newest observations."""
    url = request.getfixturevalue(f"migrated_{kind}_url")
    _, val, labels = load_split("cifar10_resnet50_cross_entropy", "val")
    env = {"CALIBRATION_SCHEDULE_SECONDS": "0.3", "CALIBRATION_JOB_ENGINE": "embedded"}  # no worker here
    with live_server(url, workers=2, env=env, log_file=tmp_path / "server.log", migrated=True) as base, \
            httpx.Client(base_url=base, timeout=120) as client:
        _ok(client.post("/v1/calibrators/sched/versions", json={"method": "temperature", "logits": val[:500].tolist(),
                                                                "labels": labels[:500].tolist()}), 201)
        _ok(client.put("/v1/calibrators/sched/policy", json={"every_labels": 1000, "last": 1000, "holdout": 0,
                                                             "method": "temperature"}))
        _ok(client.post("/v1/calibrators/sched/observations", json={"logits": val[:600].tolist(),
                                                                    "labels": labels[:600].tolist()}), 201)
        time.sleep(1.5)  # 600 new labels: below the trigger, nothing submitted
        assert [j for j in client.get("/v1/jobs").json()["jobs"] if j["kind"] == "refit"] == []
        _ok(client.post("/v1/calibrators/sched/observations", json={"logits": val[600:1200].tolist(),
                                                                    "labels": labels[600:1200].tolist()}), 201)
        deadline = time.monotonic() + 60
        while True:
            refits = [j for j in client.get("/v1/jobs").json()["jobs"] if j["kind"] == "refit"]
            if refits and refits[0]["status"] not in ("queued", "running"):
                break
            assert time.monotonic() < deadline, refits
            time.sleep(0.2)
        time.sleep(1.0)  # both processes have checked again since
        refits = [j for j in client.get("/v1/jobs").json()["jobs"] if j["kind"] == "refit"]
        assert len(refits) == 1 and refits[0]["status"] == "succeeded", refits
        newest = client.get("/v1/calibrators/sched/versions").json()["versions"][0]
        direct = cal.create("temperature").fit(val[200:1200].astype(np.float64), labels[200:1200])
        assert newest["version"] == 2 and newest["n_samples"] == 1000
        assert newest["parameters"]["temperature"] == direct.temperature_


class _Hook:
    """A real HTTP server on a free port that keeps the JSON bodies POSTed to it (``received``)."""

    def __init__(self):
        received = self.received = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                received.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/alarms"


@pytest.fixture(scope="module")
def scheduled(sqlite_head, tmp_path_factory):
    """One server for the two drift tests below, its scheduler checking every 0.3 s and its alarms
    POSTed to a webhook (a real HTTP server here); each test uses a calibrator of its own, and reads
    only that calibrator's jobs, and all the webhook's messages but those about the other's."""
    hook = _Hook()
    folder = tmp_path_factory.mktemp("scheduled")
    env = {"CALIBRATION_SCHEDULE_SECONDS": "0.3", "CALIBRATION_LOG_FLUSH_SECONDS": "0.2",
           "CALIBRATION_ALARM_WEBHOOK_URL": hook.url}
    try:
        with live_server(copy_sqlite_database(sqlite_head, folder / "calibration.db"), env=env,
                         log_file=folder / "server.log", migrated=True) as base, \
                httpx.Client(base_url=base, timeout=120) as client:
            yield client, hook
    finally:
        hook.server.shutdown()


def test_drift_monitors_are_evaluated_as_jobs_when_labels_arrive(scheduled):
    """With CALIBRATION_SCHEDULE_SECONDS the API submits an ``alarms`` job once labels or logged
    predictions arrive: the monitors are up to date without anyone calling alarms/evaluate, and
    they hold what an explicit evaluation computes."""
    client, _ = scheduled
    _, val, labels = load_split("cifar10_resnet50_cross_entropy", "val")
    _ok(client.post("/v1/calibrators/watched/versions", json={"method": "temperature",
                                                              "logits": val[:2000].tolist(),
                                                              "labels": labels[:2000].tolist()}), 201)
    _ok(client.put("/v1/calibrators/watched/logging", json={"sample_rate": 1}))
    ids = _ok(client.post("/v1/calibrators/watched/calibrate", json={"logits": val[2000:3000].tolist()}))["ids"]
    _ok(client.post("/v1/calibrators/watched/labels", json={"ids": ids, "labels": labels[2000:3000].tolist()}))
    deadline = time.monotonic() + 60
    while True:
        monitors = _ok(client.get("/v1/calibrators/watched/alarms"))["monitors"]
        labelled = [m for m in monitors if m["signal"] == "labelled"]
        if labelled and labelled[0]["n_rows"] == 1000:
            break
        assert time.monotonic() < deadline, monitors
        time.sleep(0.2)
    jobs = [j for j in _ok(client.get("/v1/jobs", params={"calibrator": "watched"}))["jobs"] if j["kind"] == "alarms"]
    assert jobs and all(j["calibrator"] == "watched" for j in jobs)
    again = _ok(client.post("/v1/calibrators/watched/alarms/evaluate"))  # nothing new: the same state
    assert [m["log_e_value"] for m in again["monitors"] if m["signal"] == "labelled"] == [
        labelled[0]["log_e_value"]]


def test_a_drift_alarm_is_posted_to_the_webhook(scheduled):
    """Predictions served over-confident (CIFAR-100 logits scaled by 4 after a fit on the plain ones),
    labelled later: the scheduled monitor raises an alarm and POSTs it, once, to
    CALIBRATION_ALARM_WEBHOOK_URL."""
    client, hook = scheduled

    def received():  # all but the other test's calibrator's messages
        return [message for message in hook.received if message.get("calibrator") != "watched"]

    _, probabilities, labels = load_split("cifar100_densenet-bc-100", "val")  # 76% accurate: over-confidence shows
    val = np.log(np.maximum(probabilities.astype(np.float64), 1e-12))  # its logits, up to a constant per row
    _ok(client.post("/v1/calibrators/drifty/versions", json={"method": "temperature",
                                                             "logits": val[:2000].tolist(),
                                                             "labels": labels[:2000].tolist()}), 201)
    _ok(client.put("/v1/calibrators/drifty/logging", json={"sample_rate": 1}))
    shifted = (val[2000:5000] * 4).tolist()
    ids = _ok(client.post("/v1/calibrators/drifty/calibrate", json={"logits": shifted}))["ids"]
    _ok(client.post("/v1/calibrators/drifty/labels", json={"ids": ids, "labels": labels[2000:5000].tolist()}))
    deadline = time.monotonic() + 60
    while not received():
        assert time.monotonic() < deadline, _ok(client.get("/v1/calibrators/drifty/alarms"))
        time.sleep(0.2)
    time.sleep(1.5)  # later evaluations find no new alarm: nothing more is posted
    alarms = _ok(client.get("/v1/calibrators/drifty/alarms"))["alarms"]
    assert len(received()) == 1, received()
    message = received()[0]
    assert message["calibrator"] == "drifty" and "drift alarm on drifty" in message["text"]
    assert {(a["version"], a["signal"]) for a in message["alarms"]} <= {(a["version"], a["signal"]) for a in alarms}
    assert all(a["e_value"] >= 1 / a["alpha"] for a in message["alarms"])
