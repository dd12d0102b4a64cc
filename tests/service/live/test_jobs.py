"""Long work as jobs (#18), on both engines: the embedded process pool (SQLite, and Postgres with
``job_engine=embedded``) and Procrastinate on Postgres with real ``calibration-service worker``
processes. Fits as jobs store what a synchronous fit stores; jobs cancel; a killed worker's job
fails instead of hanging and never stores two versions; idempotency keys replay the first answer;
the queue is bounded."""

from __future__ import annotations

import io
import time

import httpx
import numpy as np
import orjson
import pytest
from sqlalchemy import text

from app.platform.db import make_engine
from app.platform.migrate import upgrade
from tests.helpers import load_split
from tests.service.support.jobs import KIND, X, Y, wait_for
from tests.service.support.live import live_server


def npz(x, y) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **{KIND: x, "labels": y})
    return buffer.getvalue()


def stored_params(database_url: str, name: str) -> list[dict]:
    """The stored parameters (without the fit's timing) of every version of ``name``."""
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(text(
                "SELECT v.params_json FROM calibrator_versions v JOIN calibrators c ON c.id = v.calibrator_id "
                "WHERE c.name = :name ORDER BY v.version"), {"name": name}).scalars().all()
    finally:
        engine.dispose()
    return [{key: value for key, value in orjson.loads(row).items() if key != "diagnostics"} for row in rows]


def fit(http: httpx.Client, name: str, method: str, rows: int, **headers) -> httpx.Response:
    query = {"method": method}
    return http.post(f"/v1/calibrators/{name}/versions", params=query, content=npz(X[:rows], Y[:rows]),
                     headers={"Content-Type": "application/x-npz", **headers})


def check_fit_as_job_equals_a_synchronous_fit(http: httpx.Client, database_url: str) -> dict:
    sync = fit(http, "sync", "ensemble_temperature", 2000)
    assert sync.status_code == 201, sync.text
    started = fit(http, "as-job", "ensemble_temperature", 2000, Prefer="respond-async")
    assert started.status_code == 202 and started.headers["Preference-Applied"] == "respond-async", started.text
    assert started.json()["status"] in ("queued", "running") and started.json()["calibrator"] == "as-job"
    job = wait_for(http, started.headers["Location"])
    assert job["status"] == "succeeded" and job["percent"] == 100.0, job
    assert job["result"]["version"] == 1 and job["result"]["parameters"] == sync.json()["parameters"]
    assert stored_params(database_url, "as-job") == stored_params(database_url, "sync")
    return job


@pytest.fixture(scope="module")
def embedded(module_database_url):
    """One server with the embedded pool per database for the module's tests (each uses its own
    calibrator names)."""
    url = module_database_url
    with live_server(url, env={"CALIBRATION_JOB_ENGINE": "embedded"}, migrated=True) as base, \
            httpx.Client(base_url=base, timeout=120) as http:
        yield url, http


def test_embedded_fit_job_equals_the_synchronous_fit_and_is_listed(embedded):
    url, http = embedded
    job = check_fit_as_job_equals_a_synchronous_fit(http, url)
    listed = http.get("/v1/jobs", params={"calibrator": "as-job", "status": "succeeded"}).json()["jobs"]
    assert [j["id"] for j in listed] == [job["id"]]
    assert http.get("/v1/jobs", params={"status": "running"}).json()["jobs"] == []
    assert http.get("/v1/jobs", params={"status": "lost"}).status_code == 422


def test_a_running_comparison_is_cancelled_at_its_next_progress_point(embedded):
    _, http = embedded
    kind, x, y = load_split("cifar100_densenet-bc-100", "val")
    body = {kind: x.tolist(), "labels": y.tolist(), "folds": 20,
            "methods": ["temperature", "ensemble_temperature", "isotonic_multiclass"]}
    started = http.post("/v1/compare", json=body, headers={"Prefer": "respond-async"})
    assert started.status_code == 202, started.text
    location = started.headers["Location"]
    deadline = time.monotonic() + 60
    while (job := http.get(location).json())["percent"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job["status"] == "running" and 0 < job["percent"] < 100, job
    cancelled = http.delete(location)
    assert cancelled.status_code == 200, cancelled.text
    job = wait_for(http, location)
    assert job["status"] == "cancelled" and job["result"] is None and job["finished_at"], job
    assert http.delete(location).json()["status"] == "cancelled"  # a finished job stays as it is


def test_a_retried_fit_with_the_same_idempotency_key_gets_the_same_version(embedded):
    url, http = embedded
    first = fit(http, "keyed", "temperature", 500, **{"Idempotency-Key": "fit-keyed-1"})
    again = fit(http, "keyed", "temperature", 500, **{"Idempotency-Key": "fit-keyed-1"})
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    assert again.headers["Location"] == first.headers["Location"] == "/v1/calibrators/keyed/versions/1"
    other_body = fit(http, "keyed", "temperature", 400, **{"Idempotency-Key": "fit-keyed-1"})
    assert other_body.status_code == 422 and "different request" in other_body.json()["detail"]
    assert len(stored_params(url, "keyed")) == 1
    job = fit(http, "keyed", "temperature", 500, **{"Idempotency-Key": "fit-keyed-2", "Prefer": "respond-async"})
    replayed = fit(http, "keyed", "temperature", 500, **{"Idempotency-Key": "fit-keyed-2", "Prefer": "respond-async"})
    assert job.status_code == replayed.status_code == 202 and replayed.json()["id"] == job.json()["id"]
    assert wait_for(http, job.headers["Location"])["result"]["version"] == 2
    assert len(stored_params(url, "keyed")) == 2


@pytest.fixture(scope="module")
def bounded(tmp_path_factory):
    """One server for the two tests below, on an empty SQLite file that it migrates as it starts (the
    one-command deployment): a queue of one job, and a sync budget that sends any fit but a tiny one
    to it. Each test leaves no job queued or running."""
    env = {"CALIBRATION_JOB_QUEUE_LIMIT": "1", "CALIBRATION_JOB_PROCESSES": "1",
           "CALIBRATION_SYNC_BUDGET_SECONDS": "0.01"}
    url = f"sqlite:///{tmp_path_factory.mktemp('bounded') / 'calibration.db'}"
    with live_server(url, env=env) as base, httpx.Client(base_url=base, timeout=60) as http:
        yield http


def test_the_job_queue_is_bounded(bounded):
    http = bounded
    first = fit(http, "a", "auto", 3000, Prefer="respond-async")
    second = fit(http, "b", "temperature", 500, Prefer="respond-async")
    assert first.status_code == 202 and second.status_code == 503, second.text
    assert second.headers["Retry-After"] == "30" and "CALIBRATION_JOB_QUEUE_LIMIT" in second.json()["detail"]
    assert wait_for(http, first.headers["Location"], 300)["status"] == "succeeded"
    third = fit(http, "b", "temperature", 500, Prefer="respond-async")
    assert third.status_code == 202
    assert wait_for(http, third.headers["Location"], 300)["status"] == "succeeded"


def test_a_fit_estimated_past_the_sync_budget_runs_as_a_job(bounded):
    http = bounded
    quick = fit(http, "small", "temperature", 100)
    long = fit(http, "large", "vector", 3000)  # estimated 0.12 s (temperature on 100 rows: 0.0002 s)
    assert quick.status_code == 201 and long.status_code == 202, long.text
    assert wait_for(http, long.headers["Location"], 300)["result"]["method"] == "vector"


# -- Procrastinate on Postgres, with real worker processes (the fixture: live/conftest.py) ----------

@pytest.mark.postgres
@pytest.mark.slow
def test_procrastinate_workers_share_the_queue_and_fit_what_a_synchronous_fit_stores(procrastinate):
    url, http, workers = procrastinate
    queued = fit(http, "early", "temperature", 500, Prefer="respond-async")
    time.sleep(0.5)
    assert http.get(queued.headers["Location"]).json()["status"] == "queued"  # no worker yet
    workers(2)
    assert wait_for(http, queued.headers["Location"])["status"] == "succeeded"
    check_fit_as_job_equals_a_synchronous_fit(http, url)
    started = [fit(http, f"shared-{i}", "ensemble_temperature", 5000, Prefer="respond-async") for i in range(6)]
    jobs = [wait_for(http, response.headers["Location"]) for response in started]
    assert [job["status"] for job in jobs] == ["succeeded"] * 6
    assert len({job["worker"] for job in jobs}) == 2, [job["worker"] for job in jobs]


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.failed_jobs
def test_a_killed_worker_s_fit_fails_instead_of_hanging_and_stores_no_version(procrastinate):
    url, http, workers = procrastinate
    kind, x, y = load_split("cifar100_densenet-bc-100", "val")
    body = {"method": "auto", "options": {"folds": 10}, kind: x.tolist(), "labels": y.tolist()}
    running = workers(1)
    started = http.post("/v1/calibrators/killed/versions", json=body, headers={"Prefer": "respond-async"})
    assert started.status_code == 202, started.text
    location = started.headers["Location"]
    deadline = time.monotonic() + 60
    while http.get(location).json()["status"] != "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    running.kill()
    job = wait_for(http, location, 30)
    assert job["status"] == "failed" and job["error"]["title"] == "Worker lost", job
    assert stored_params(url, "killed") == []
    workers(1)  # a new worker takes new jobs; the lost one is not run twice
    retried = http.post("/v1/calibrators/killed/versions", json={**body, "method": "temperature", "options": {}},
                        headers={"Prefer": "respond-async"})
    assert wait_for(http, retried.headers["Location"])["result"]["version"] == 1
    assert len(stored_params(url, "killed")) == 1


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_job_states_are_one_enum_stored_as_their_text(request, backend):
    """``JobStatus`` is what the store writes and compares; the column keeps the same text as before."""
    from app.jobs import store as job_store
    from app.jobs.schemas import JOB_STATES
    from app.jobs.status import STATES, JobStatus
    from app.platform.db import Database

    assert JOB_STATES == STATES == ("queued", "running", "succeeded", "failed", "cancelled")
    url = request.getfixturevalue(f"{backend}_url")
    upgrade(url)
    db = Database(url)
    try:
        with db.write() as session:
            job_store.create_job(session, "enum-job", "fit", None, {}, b"")
        with db.write() as session:
            assert job_store.claim(session, "enum-job", "here:1")
        with db.write() as session:
            assert job_store.finish(session, "enum-job", JobStatus.SUCCEEDED, result={"version": 1})
        with db.read() as session:
            status, step = session.execute(text("SELECT status, step FROM jobs WHERE id = 'enum-job'")).one()
            assert job_store.get_job(session, "enum-job").status == JobStatus.SUCCEEDED
    finally:
        db.dispose()
    assert (type(status), status, step) == (str, "succeeded", "succeeded")


def test_every_job_kind_has_one_handler_registered_by_its_domain():
    """``app.jobs.handlers`` maps each kind the API shows to the handler its domain's ``tasks`` module
    registered (the wiring imports them all); an unknown kind is refused."""
    import typing

    import app.wiring  # noqa: F401 - fills the registry
    from app.jobs.handlers import JOB_HANDLERS, handler_of, job_handler
    from app.jobs.schemas import JobOut

    kinds = typing.get_args(typing.get_type_hints(JobOut)["kind"])
    assert {kind: JOB_HANDLERS[kind].__module__ for kind in kinds} == {
        "fit": "app.registry.tasks", "compare": "app.comparisons.tasks", "compare-part": "app.jobs.tasks",
        "refit": "app.promotion.tasks", "alarms": "app.monitoring.tasks", "power": "app.monitoring.tasks"}
    assert set(JOB_HANDLERS) == set(kinds)
    with pytest.raises(ValueError, match="unknown job kind 'nope'"):
        handler_of("nope")
    with pytest.raises(ValueError, match="'fit' already has a handler"):
        job_handler("fit")(lambda job: None)
