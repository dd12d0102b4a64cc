"""The real server (uvicorn in a subprocess) on SQLite and on Postgres: end to end on real
model outputs, restarts, concurrent fits and two instances sharing one database."""

from __future__ import annotations

import concurrent.futures
import functools
import time

import httpx
import numpy as np
import orjson
import pytest

import calibration as cal
from app.registry.schemas import EXAMPLE_LABELS, EXAMPLE_LOGITS
from tests.helpers import load_split
from tests.service.support.live import live_server

# one client for this module's plain calls, keeping no connection between them (a fresh connection
# each, as ``httpx.get`` and co make): those build a client and its SSL context (a CA bundle read, ~35 ms
# of CPU) every call
HTTP = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))

FITS = [
    # (data set, method, options)
    ("cifar10_resnet50_cross_entropy", "temperature", {}),
    ("cifar10_resnet50_cross_entropy", "expectation_consistency", {}),
    ("cifar10_resnet50_cross_entropy", "ensemble_temperature", {}),
    ("cifar10_resnet50_cross_entropy", "dirichlet", {"off_diagonal_l2": 1e-3, "bias_l2": 1e-3}),
    ("cifar10_resnet50_cross_entropy", "isotonic_multiclass", {}),
    ("cifar100_densenet-bc-100", "temperature", {}),
    ("cifar100_densenet-bc-100", "isotonic_multiclass", {}),
]


def _post(client: httpx.Client, path: str, body: dict) -> dict:
    """POST ``body`` as JSON, the answer's JSON. orjson writes and reads it: the same numbers
    (shortest round-trip floats) as the standard library, at a tenth of its CPU on the arrays of a
    real split (half a million floats a body)."""
    response = client.post(path, content=orjson.dumps(body), headers={"content-type": "application/json"},
                           timeout=120)
    assert response.status_code in (200, 201), response.text
    return orjson.loads(response.content)


METRICS = ("ece", "adaptive_ece", "classwise_ece", "brier", "accuracy", "kde_ece")


@functools.cache
def _core(position: int) -> tuple[np.ndarray, dict, dict]:
    """What the core computes for ``FITS[position]``, fitted on the validation split: its probabilities
    on the test split and the metrics of the test split before and after calibration (the same for
    every database, so computed once)."""
    data, method, options = FITS[position]
    kind, x_val, y_val = load_split(data, "val")
    _, x_test, y_test = load_split(data, "test")
    expected = cal.create(method, {**options, "input": kind}).fit(x_val, y_val).predict_proba(x_test)
    raw = cal.validate_inputs(x_test, kind).probabilities
    return (expected, {metric: getattr(cal, metric)(expected, y_test) for metric in METRICS},
            {metric: getattr(cal, metric)(raw, y_test) for metric in METRICS})


def _serve_and_check(client: httpx.Client) -> dict[str, np.ndarray]:
    outputs = {}
    for position, (data, method, options) in enumerate(FITS):
        kind, x_val, y_val = load_split(data, "val")
        _, x_test, y_test = load_split(data, "test")
        name = f"{method}-{position}"
        version = _post(client, f"/v1/calibrators/{name}/versions",
                        {"method": method, "options": options, kind: x_val.tolist(), "labels": y_val.tolist()})
        assert version["diagnostics"]["converged"]
        served = np.array(_post(client, f"/v1/calibrators/{name}/calibrate", {kind: x_test.tolist()})["probabilities"])
        expected, after, before = _core(position)
        assert np.array_equal(served, expected), f"{name}: served probabilities differ from the core's"
        report = _post(client, f"/v1/calibrators/{name}/report", {kind: x_test.tolist(), "labels": y_test.tolist()})
        for metric in METRICS:
            assert report["after"]["metrics"][metric] == after[metric]
            assert report["before"]["metrics"][metric] == before[metric]
        outputs[name] = served
    return outputs


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_end_to_end_on_real_data_and_restart(kind, request):
    url = request.getfixturevalue(f"{kind}_url")
    with live_server(url) as base, httpx.Client(base_url=base) as client:
        before = _serve_and_check(client)
    with live_server(url) as base, httpx.Client(base_url=base) as client:
        for position, (data, _method, _options) in enumerate(FITS):
            name = f"{_method}-{position}"
            kind_, _, _ = load_split(data, "val")
            _, x_test, _ = load_split(data, "test")
            served = _post(client, f"/v1/calibrators/{name}/calibrate", {kind_: x_test.tolist()})
            assert np.array_equal(np.array(served["probabilities"]), before[name]), f"{name} changed on restart"


def _example_fit(base: str, name: str) -> int:
    response = HTTP.post(f"{base}/v1/calibrators/{name}/versions", timeout=60,
                          json={"method": "temperature", "logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS})
    assert response.status_code == 201, response.text
    return response.json()["version"]


@pytest.fixture(scope="module")
def instances(module_database_url):
    """Two servers on one migrated database of each kind, shared by the two tests below (each fits a
    calibrator name of its own): the first with two uvicorn workers (concurrent fits land on either,
    each with its own cache), the second with one."""
    url = module_database_url
    with live_server(url, workers=2, migrated=True) as a, live_server(url, migrated=True) as b:
        yield a, b


def test_concurrent_fits_of_one_name_get_distinct_versions(instances):
    base, _ = instances
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        versions = list(pool.map(lambda _: _example_fit(base, "contended"), range(50)))
        assert sorted(versions) == list(range(1, 51))
        listed = HTTP.get(f"{base}/v1/calibrators/contended/versions?page_size=100").json()["versions"]
        assert sorted(v["version"] for v in listed) == list(range(1, 51))
        # concurrent alias moves end in one of the requested states, readable everywhere
        moves = list(pool.map(lambda v: HTTP.put(f"{base}/v1/calibrators/contended/aliases/production",
                                                   json={"version": v}, timeout=30).status_code, range(1, 21)))
        assert set(moves) == {200}
        final = HTTP.get(f"{base}/v1/calibrators/contended").json()["aliases"]["production"]
        assert 1 <= final <= 20
        served = HTTP.post(f"{base}/v1/calibrators/contended@production/calibrate",
                            json={"logits": EXAMPLE_LOGITS}).json()
        assert served["version"] == final


def test_two_instances_on_one_database_agree(instances):
    a, b = instances
    batch = {"logits": EXAMPLE_LOGITS}
    assert _example_fit(a, "shared") == 1
    assert HTTP.post(f"{b}/v1/calibrators/shared/calibrate", json=batch).json()["version"] == 1
    body = {"method": "ensemble_temperature", "logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS}
    assert HTTP.post(f"{a}/v1/calibrators/shared/versions", json=body).json()["version"] == 2
    assert HTTP.post(f"{b}/v1/calibrators/shared/calibrate", json=batch).json()["version"] == 2
    HTTP.put(f"{a}/v1/calibrators/shared/aliases/production", json={"version": 1})
    assert HTTP.post(f"{b}/v1/calibrators/shared@production/calibrate", json=batch).json()["version"] == 1
    HTTP.put(f"{b}/v1/calibrators/shared/aliases/production", json={"version": 2})
    assert HTTP.post(f"{a}/v1/calibrators/shared@production/calibrate", json=batch).json()["version"] == 2
    # a version deleted through one instance is gone from the other, cache or not
    HTTP.delete(f"{a}/v1/calibrators/shared/aliases/production")
    assert HTTP.delete(f"{a}/v1/calibrators/shared/versions/1").status_code == 204
    gone = HTTP.post(f"{b}/v1/calibrators/shared/versions/1/calibrate", json=batch)
    assert gone.status_code == 404


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_scheduled_drift_monitoring_succeeds_as_deployed(kind, request, tmp_path):
    """The scheduler on (as by default; every second here) and, on Postgres, a worker beside the
    API as docker-compose runs them: predictions served with logging, labelled later, are picked up
    by a scheduled ``alarms`` job that succeeds, with the monitors over exactly the labelled rows.
    Before the fix in app/jobs/tasks.py every such job ended failed (its result held datetimes the JSON
    column refused) while the monitors were saved, so only the job's state shows it; the live
    server's stop also fails the test on any failed job."""
    url = request.getfixturevalue(f"migrated_{kind}_url")
    _, val, labels = load_split("cifar10_resnet50_cross_entropy", "val")
    with live_server(url, log_file=tmp_path / "server.log", worker=kind == "postgres", migrated=True) as base, \
            httpx.Client(base_url=base, timeout=120) as client:
        _post(client, "/v1/calibrators/watched/versions",
              {"method": "temperature", "logits": val[:2000].tolist(), "labels": labels[:2000].tolist()})
        assert client.put("/v1/calibrators/watched/logging", json={"sample_rate": 1}).status_code == 200
        ids = [f"w{i}" for i in range(1000)]
        _post(client, "/v1/calibrators/watched/calibrate", {"logits": val[2000:3000].tolist(), "ids": ids})
        deadline, done = time.monotonic() + 60, 0
        while done < 1000:  # the prediction log is flushed every second: label once the rows are there
            done += _post(client, "/v1/calibrators/watched/labels",
                          {"ids": ids, "labels": labels[2000:3000].tolist()})["labelled"]
            assert time.monotonic() < deadline, done
            time.sleep(0.2)
        deadline = time.monotonic() + 90
        while True:
            jobs = [j for j in client.get("/v1/jobs", params={"calibrator": "watched"}).json()["jobs"]
                    if j["kind"] == "alarms" and j["status"] not in ("queued", "running")]
            labelled = [m for m in client.get("/v1/calibrators/watched/alarms").json()["monitors"]
                        if m["signal"] == "labelled"]
            if jobs and labelled and labelled[0]["n_rows"] == 1000:
                break
            assert time.monotonic() < deadline, (jobs, labelled)
            time.sleep(0.2)
        time.sleep(1.5)  # the jobs of the ticks since then have run too
        jobs = [j for j in client.get("/v1/jobs", params={"calibrator": "watched"}).json()["jobs"]
                if j["kind"] == "alarms"]
    assert jobs and all(j["status"] == "succeeded" for j in jobs if j["status"] not in ("queued", "running")), jobs
    assert any(monitor["signal"] == "labelled" and monitor["n_rows"] == 1000
               for job in jobs if job["status"] == "succeeded" for monitor in job["result"]["monitors"]), jobs
