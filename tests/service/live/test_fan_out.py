"""Cross-validation fanned out over workers (#18): a comparison job's, and an ``auto`` fit job's,
candidate x fold fits run as ``compare-part`` jobs on real ``calibration-service worker`` processes
(Procrastinate on Postgres) or in the parent's own process (the embedded pool with
``CALIBRATION_JOB_FAN_OUT=on``); the merge equals the single job: the comparison's values, and an
``auto`` fit's stored version byte for byte. Cancelling the parent cancels its parts; a part whose
worker is killed is marked "Worker lost" and run by the parent itself, which stores the same version."""

from __future__ import annotations

import functools
import os
import signal
import time

import httpx
import orjson
import pytest
from sqlalchemy import text

from app.platform.db import make_engine
from tests.helpers import load_split
from tests.service.support.jobs import KIND, Workers, X, Y, wait_for
from tests.service.support.live import live_server

COMPARE = {"methods": ["temperature", "ensemble_temperature", "expectation_consistency", "isotonic_multiclass"],
           "folds": 3, "seed": 4}
AUTO = {"method": "auto", "options": {"folds": 4, "seed": 3}, KIND: X[:3000].tolist(), "labels": Y[:3000].tolist()}


def without_timings(value):
    """A comparison (or anything holding one) without its fit times, the only values that differ run to run."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if k not in ("fit_seconds", "seconds")}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def parts_of(http: httpx.Client) -> list[dict]:
    return [j for j in http.get("/v1/jobs", params={"limit": 100}).json()["jobs"] if j["kind"] == "compare-part"]


def stored_version(database_url: str, name: str) -> tuple[bytes, dict, dict]:
    """Version 1 of ``name`` as stored: its parameter JSON (bytes, every fit's ``seconds`` left out: the
    only values that differ run to run), its diagnostics and its report's comparison, without timings."""
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            params_json, report = connection.execute(text(
                "SELECT v.params_json, v.report FROM calibrator_versions v JOIN calibrators c ON c.id = v.calibrator_id"
                " WHERE c.name = :name AND v.version = 1"), {"name": name}).one()
    finally:
        engine.dispose()
    params = without_timings(orjson.loads(params_json))
    report = orjson.loads(report) if isinstance(report, str | bytes) else report
    diagnostics = params.pop("diagnostics")
    return orjson.dumps(params, option=orjson.OPT_SORT_KEYS), without_timings(diagnostics), \
        without_timings(report["comparison"])


def live_workers(database_url: str, count: int) -> None:
    """Wait until ``count`` Procrastinate workers have registered (the fan-out sizes its parts by them)."""
    engine = make_engine(database_url)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            with engine.connect() as connection:
                if connection.execute(text("SELECT count(*) FROM procrastinate_workers")).scalar_one() >= count:
                    return
            time.sleep(0.1)
    finally:
        engine.dispose()
    raise AssertionError(f"{count} workers did not start")


def check_fanned_out_comparison(http: httpx.Client, parts: int) -> list[dict]:
    body = {**COMPARE, KIND: X.tolist(), "labels": Y.tolist()}
    single = http.post("/v1/compare", json=body)
    assert single.status_code == 200, single.text
    started = http.post("/v1/compare", json=body, headers={"Prefer": "respond-async"})
    assert started.status_code == 202, started.text
    job = wait_for(http, started.headers["Location"], 300)
    assert job["status"] == "succeeded", job
    assert without_timings(job["result"]) == without_timings(single.json())
    found = [p for p in parts_of(http) if p["calibrator"] is None]  # this comparison's (any calibrator's are a fit's)
    assert len(found) == parts and {p["status"] for p in found} == {"succeeded"}, found
    return found


def check_fanned_out_auto_fit(http: httpx.Client, database_url: str, parts: int) -> list[dict]:
    """An ``auto`` fit as a job, its cross-validation in ``parts`` parts, stores the version a
    synchronous fit (one process, no parts) stores: the same parameter bytes, diagnostics and comparison."""
    sync = http.post("/v1/calibrators/auto-sync/versions", json=AUTO)
    assert sync.status_code == 201, sync.text
    started = http.post("/v1/calibrators/auto-parts/versions", json=AUTO, headers={"Prefer": "respond-async"})
    assert started.status_code == 202, started.text
    job = wait_for(http, started.headers["Location"], 300)
    assert job["status"] == "succeeded" and job["result"]["version"] == 1, job
    assert job["result"]["parameters"] == sync.json()["parameters"]
    assert stored_version(database_url, "auto-parts") == stored_version(database_url, "auto-sync")
    found = [p for p in parts_of(http) if p["calibrator"] == "auto-parts"]
    assert len(found) == parts and {p["status"] for p in found} == {"succeeded"}, found
    return found


def test_the_embedded_pool_runs_the_parts_itself_with_fan_out_on(migrated_sqlite_url):
    sqlite_url = migrated_sqlite_url
    with live_server(sqlite_url, env={"CALIBRATION_JOB_ENGINE": "embedded", "CALIBRATION_JOB_FAN_OUT": "on"},
                     migrated=True) as base, \
            httpx.Client(base_url=base, timeout=120) as http:
        parts = check_fanned_out_comparison(http, 1)  # one process runs them: one part, no fold's work twice
        parts += check_fanned_out_auto_fit(http, sqlite_url, 1)
    assert len({part["worker"] for part in parts}) == 1


def cancel_mid_cross_validation(http: httpx.Client, location: str) -> dict:
    """Wait until the job reports cross-validation progress past its start, cancel it, and return the
    cancelled job."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job = http.get(location).json()
        if "cross-validation" in (job["step"] or "") and job["percent"] > 5:
            break
        time.sleep(0.05)
    assert job["status"] == "running" and "cross-validation" in job["step"] and 5 < job["percent"] < 100, job
    assert http.delete(location).status_code == 200
    return wait_for(http, location, 60)


def all_parts_finished(http: httpx.Client, calibrator: str | None = None) -> list[dict]:
    """The parts of the comparison (``calibrator`` None) or ``auto`` fit of ``calibrator``, once all
    have finished (or after a minute)."""
    deadline = time.monotonic() + 60
    while (parts := [p for p in parts_of(http) if p["calibrator"] == calibrator]) and time.monotonic() < deadline:
        if all(p["status"] in ("cancelled", "succeeded", "failed") for p in parts):
            break
        time.sleep(0.2)
    return parts


@pytest.mark.postgres
@pytest.mark.slow
def test_cancelling_a_fanned_out_comparison_cancels_its_parts(procrastinate):
    url, http, workers = procrastinate
    kind, x, y = load_split("cifar100_densenet-bc-100", "val")
    body = {"methods": ["temperature", "isotonic_one_vs_all", "irova_ts", "ensemble_temperature"], "folds": 10,
            kind: x.tolist(), "labels": y.tolist()}
    workers(1)
    live_workers(url, 1)
    started = http.post("/v1/compare", json=body, headers={"Prefer": "respond-async"})
    job = cancel_mid_cross_validation(http, started.headers["Location"])
    assert job["status"] == "cancelled", job
    parts = all_parts_finished(http)
    assert parts and {p["status"] for p in parts} == {"cancelled"}, parts  # one worker: one part, the parent's


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.failed_jobs
def test_a_part_whose_worker_is_killed_is_run_by_the_parent_and_the_auto_fit_stores_the_same_version(procrastinate):
    """Half the validation rows, 5 folds: each part still runs for about two seconds (its half of
    the folds of every candidate), long enough to be found running by a poll every 50 ms and killed
    (the test fails if no part is found running elsewhere)."""
    url, http, workers = procrastinate
    kind, x, y = load_split("cifar100_densenet-bc-100", "val")
    body = {"method": "auto", "options": {"folds": 5}, kind: x[:2500].tolist(), "labels": y[:2500].tolist()}
    workers(2)
    live_workers(url, 2)
    undisturbed = http.post("/v1/calibrators/all-parts/versions", json=body, headers={"Prefer": "respond-async"})
    assert undisturbed.status_code == 202, undisturbed.text
    assert wait_for(http, undisturbed.headers["Location"], 300)["status"] == "succeeded"
    started = http.post("/v1/calibrators/lost-part/versions", json=body, headers={"Prefer": "respond-async"})
    assert started.status_code == 202, started.text
    location = started.headers["Location"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        parent = http.get(location).json()["worker"]
        elsewhere = [p for p in parts_of(http) if p["status"] == "running" and p["worker"] != parent]
        if elsewhere:
            break
        time.sleep(0.05)
    assert elsewhere, parts_of(http)
    os.kill(int(elsewhere[0]["worker"].rsplit(":", 1)[1]), signal.SIGKILL)  # that worker process only
    job = wait_for(http, location, 300)
    assert job["status"] == "succeeded" and job["result"]["version"] == 1, job
    lost = http.get(f"/v1/jobs/{elsewhere[0]['id']}").json()
    assert lost["status"] == "failed" and lost["error"]["title"] == "Worker lost", lost
    # the parent ran the lost part itself: the version is the one the undisturbed fan-out stored
    assert stored_version(url, "lost-part") == stored_version(url, "all-parts")


# the tests below share one server and one worker of two processes (the ``procrastinate`` fixture's
# settings), started once instead of once a test: each reads only its own job's parts (a comparison's
# have no calibrator, an ``auto`` fit's its calibrator's name) and none kills a worker
@pytest.fixture(scope="module")
def two_workers(tmp_path_factory, request):
    databases = request.getfixturevalue("migrated_postgres")  # emptied afterwards for the next test
    url = databases.take()
    drop = functools.partial(databases.give_back, url)
    folder = tmp_path_factory.mktemp("fan-out")
    try:
        env = {"CALIBRATION_JOB_ENGINE": "procrastinate", "CALIBRATION_JOB_STALE_SECONDS": "3"}
        started = []
        try:
            with live_server(url, env=env, log_file=folder / "server.log", migrated=True) as base, \
                    httpx.Client(base_url=base, timeout=120) as http:
                started.append(Workers(url, 2, env, open(folder / "workers.log", "ab")))  # noqa: SIM115
                live_workers(url, 2)
                yield url, http
        finally:
            for running in started:
                running.stop()
    finally:
        drop()


@pytest.mark.postgres
@pytest.mark.slow
def test_a_comparison_fans_out_over_the_workers_and_equals_the_single_job(two_workers):
    _, http = two_workers
    parts = check_fanned_out_comparison(http, 2)  # one part per worker
    assert len({part["worker"] for part in parts}) == 2, [part["worker"] for part in parts]


@pytest.mark.postgres
@pytest.mark.slow
def test_an_auto_fit_fans_out_over_the_workers_and_stores_the_single_job_s_version(two_workers):
    url, http = two_workers
    check_fanned_out_auto_fit(http, url, 2)


@pytest.mark.postgres
@pytest.mark.slow
def test_cancelling_a_fanned_out_auto_fit_cancels_its_parts_and_stores_nothing(two_workers):
    _, http = two_workers
    kind, x, y = load_split("cifar100_densenet-bc-100", "val")
    body = {"method": "auto", "options": {"folds": 10}, kind: x.tolist(), "labels": y.tolist()}
    started = http.post("/v1/calibrators/stopped/versions", json=body, headers={"Prefer": "respond-async"})
    assert started.status_code == 202, started.text
    job = cancel_mid_cross_validation(http, started.headers["Location"])
    assert job["status"] == "cancelled" and job["result"] is None, job
    parts = all_parts_finished(http, "stopped")
    assert len(parts) == 2 and "cancelled" in {p["status"] for p in parts}, parts
    assert {p["status"] for p in parts} <= {"cancelled", "succeeded"}, parts
    assert http.get("/v1/calibrators/stopped/versions/1").status_code == 404
