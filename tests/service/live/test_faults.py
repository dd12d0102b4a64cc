"""Faults: a server killed (SIGKILL) in the middle of fits leaves no partial version and the
next start serves everything committed; with Postgres stopped, requests get 503 with
Retry-After and readiness fails while liveness passes, and the service recovers by itself
when Postgres returns. The outage test runs its own Postgres cluster (initdb + pg_ctl in a
temporary directory), never the shared server."""

from __future__ import annotations

import concurrent.futures
import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from sqlalchemy import create_engine, text

import calibration as cal
from app.platform.migrate import upgrade
from app.registry.schemas import EXAMPLE_LABELS, EXAMPLE_LOGITS
from tests.helpers import load_split
from tests.service.support.databases import postgres_unavailable
from tests.service.support.live import LiveServer, free_port

# one client for this module's plain calls, keeping no connection between them (a fresh connection
# each, as ``httpx.get`` and co make): those build a client and its SSL context (a CA bundle read, ~35 ms
# of CPU) every call
HTTP = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))

BATCH = {"logits": EXAMPLE_LOGITS}


def _fit(base: str, name: str, method: str = "temperature", timeout: float = 60) -> httpx.Response:
    body = {"method": method, "logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS}
    return HTTP.post(f"{base}/v1/calibrators/{name}/versions", json=body, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_server_killed_mid_fit_loses_only_what_was_not_acknowledged(kind, request, tmp_path):
    url = request.getfixturevalue(f"migrated_{kind}_url")
    # no sync budget: the slow fit runs in its request, which the kill cuts off
    server = LiveServer(url, env={"CALIBRATION_SYNC_BUDGET_SECONDS": "1e9"}, log_file=tmp_path / "server.log",
                        migrated=True)
    base = server.start()
    committed = {}
    for name in ("kept", "other"):
        assert _fit(base, name).status_code == 201
        committed[name] = HTTP.post(f"{base}/v1/calibrators/{name}/calibrate", json=BATCH).json()
    # a slow fit (Dirichlet on CIFAR-100, seconds) and a stream of small fits, killed mid-way
    input_kind, x_val, y_val = load_split("cifar100_densenet-bc-100", "val")
    slow = {"method": "dirichlet", input_kind: x_val.tolist(), "labels": y_val.tolist()}
    acknowledged = []

    def small_fit(_):
        try:
            response = _fit(base, "stream", timeout=30)
        except httpx.TransportError:
            return
        if response.status_code == 201:
            acknowledged.append(response.json()["version"])

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        slow_fit = pool.submit(httpx.post, f"{base}/v1/calibrators/slow/versions", json=slow, timeout=120)
        time.sleep(1.0)  # the slow fit is now computing
        small = list(pool.map(lambda i: pool.submit(small_fit, i), range(40)))
        time.sleep(0.3)
        server.stop(kill=True)
        with pytest.raises(httpx.TransportError):
            slow_fit.result()
        for future in small:
            future.result()
    base = server.start()
    try:
        assert HTTP.get(f"{base}/v1/calibrators/slow").status_code == 404, "a killed fit left a calibrator"
        for name, served in committed.items():
            assert HTTP.post(f"{base}/v1/calibrators/{name}/calibrate", json=BATCH).json() == served
        stream = HTTP.get(f"{base}/v1/calibrators/stream/versions?page_size=100")
        stored = sorted(v["version"] for v in stream.json()["versions"]) if stream.status_code == 200 else []
        # every acknowledged fit survived, and every stored version is whole and servable
        assert set(acknowledged) <= set(stored)
        for version in stored:
            out = HTTP.post(f"{base}/v1/calibrators/stream/versions/{version}/calibrate", json=BATCH)
            assert out.status_code == 200 and out.json()["version"] == version
        # the next fit gets the next number: nothing half-written holds one
        assert _fit(base, "slow").json()["version"] == 1
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_job_whose_process_died_is_reported_failed_not_running_for_ever(kind, request, tmp_path):
    url = request.getfixturevalue(f"migrated_{kind}_url")
    server = LiveServer(url, env={"CALIBRATION_JOB_STALE_SECONDS": "2", "CALIBRATION_JOB_ENGINE": "embedded"},
                        log_file=tmp_path / "server.log", expect_failed_jobs=True, migrated=True)  # the killed one
    base = server.start()
    input_kind, x_val, y_val = load_split("cifar100_densenet-bc-100", "val")
    # 20 folds: about 11 s of work on a fast CPU (5 folds took 2.2 s, and the job could end
    # before the check below); the server is killed 2.5 s after the job started, whatever its length
    body = {input_kind: x_val.tolist(), "labels": y_val.tolist(), "folds": 20}
    started = HTTP.post(f"{base}/v1/compare", json=body, headers={"Prefer": "respond-async"}, timeout=60)
    assert started.status_code == 202
    location = started.headers["location"]
    # its process may take seconds to start on a loaded machine; once running, the heartbeat
    # (every 0.2 s) keeps the live job running well past the stale time
    assert _until(lambda: HTTP.get(f"{base}{location}").json()["status"] == "running", 60)
    time.sleep(2.5)
    assert HTTP.get(f"{base}{location}").json()["status"] == "running"
    server.stop(kill=True)  # its job processes exit with it (they watch their parent)
    base = server.start()
    try:
        job = _until(lambda: (lambda j: j if j["status"] not in ("queued", "running") else None)(
            HTTP.get(f"{base}{location}").json()), 10)
        assert job and job["status"] == "failed", job
        assert job["error"]["title"] == "Worker lost" and "no heartbeat" in job["error"]["detail"]
    finally:
        server.stop()


def _postgres_binaries() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return os.path.dirname(found[-1])
    if shutil.which("pg_ctl"):
        return os.path.dirname(shutil.which("pg_ctl"))
    postgres_unavailable("no pg_ctl to run a private cluster")


class PrivateCluster:
    """A throwaway Postgres cluster in a temporary directory, on its own port (as the postgres
    user when the tests run as root, since initdb refuses root)."""

    def __init__(self, directory):
        self.bin = _postgres_binaries()
        self.data = directory / "pgdata"
        self.socket = directory
        self.port = free_port()
        self.prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.prefix:
            shutil.chown(directory, "postgres")

    def _run(self, *args: str) -> None:
        subprocess.run([*self.prefix, *args], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self._run(f"{self.bin}/initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.socket} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(f"{self.bin}/pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.data / "log"),
                  "-w", "start")

    def stop(self) -> None:
        self._run(f"{self.bin}/pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/calibration"


@pytest.fixture
def cluster():
    # not under pytest's tmp_path: the postgres user must be able to reach the directory
    directory = Path(tempfile.mkdtemp(prefix="calibration-cluster-"))
    cluster = PrivateCluster(directory)
    try:
        cluster.init()
        cluster.start()
    except (subprocess.CalledProcessError, OSError) as exc:
        postgres_unavailable(f"cannot start a private cluster: {exc}")
    admin = create_engine(cluster.url.replace("/calibration", "/postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text("CREATE DATABASE calibration"))
    admin.dispose()
    yield cluster
    with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
        cluster.stop()
    shutil.rmtree(directory, ignore_errors=True)


def _until(condition, seconds: float):
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


@pytest.mark.postgres
@pytest.mark.slow
def test_a_database_outage_is_503_and_the_service_recovers_without_a_restart(cluster, tmp_path):
    upgrade(cluster.url)
    server = LiveServer(cluster.url, env={"CALIBRATION_DB_TIMEOUT_SECONDS": "2"}, log_file=tmp_path / "server.log")
    base = server.start()
    try:
        assert _fit(base, "demo").status_code == 201
        before = HTTP.post(f"{base}/v1/calibrators/demo/calibrate", json=BATCH).json()
        infer = {"inputs": [{"name": "logits", "shape": [1, 3], "datatype": "FP64", "data": [1.0, 2.0, 3.0]}]}
        cluster.stop()
        requests = [
            ("POST", "/v1/calibrators/demo/calibrate", BATCH),
            ("POST", "/v1/calibrators/demo/versions/1/calibrate", BATCH),
            ("POST", "/v1/calibrators/demo/versions", {"method": "temperature", "logits": EXAMPLE_LOGITS,
                                                       "labels": EXAMPLE_LABELS}),
            ("GET", "/v1/calibrators", None),
            ("PUT", "/v1/calibrators/demo/aliases/production", {"version": 1}),
            ("POST", "/v2/models/demo/infer", infer),
        ]
        for method, path, body in requests:
            response = httpx.request(method, f"{base}{path}", json=body, timeout=30)
            assert response.status_code == 503, f"{method} {path}: {response.status_code} {response.text}"
            assert response.headers["retry-after"] == "5"
            said = response.json()["error" if path.startswith("/v2") else "detail"]
            assert "database is unreachable" in said
        ready = HTTP.get(f"{base}/readyz", timeout=30)
        assert ready.status_code == 503 and "unreachable" in ready.json()["database"]
        assert HTTP.get(f"{base}/v2/health/ready", timeout=30).status_code == 503
        assert HTTP.get(f"{base}/healthz").status_code == 200
        assert HTTP.get(f"{base}/v2/health/live").status_code == 200
        cluster.start()
        recovered = _until(lambda: HTTP.get(f"{base}/readyz", timeout=30).status_code == 200, 30)
        assert recovered, "readiness did not recover within 30 s of Postgres returning"
        assert HTTP.post(f"{base}/v1/calibrators/demo/calibrate", json=BATCH).json() == before
        assert _fit(base, "demo").json()["version"] == 2
        assert server.process.poll() is None  # the same process throughout
    finally:
        server.stop()
    local = cal.TemperatureScaling().fit(np.array(EXAMPLE_LOGITS), np.array(EXAMPLE_LABELS))
    assert np.array_equal(np.array(before["probabilities"]), local.predict_proba(np.array(EXAMPLE_LOGITS)))


@pytest.mark.postgres
def test_connections_the_server_dropped_are_replaced_without_a_failed_request(migrated_postgres_url):
    """Every backend of the service's database is terminated (as a Postgres restart or an idle
    timeout in a proxy would): the next requests, reads on the hot path and writes, succeed."""
    from starlette.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    with TestClient(create_app(Settings(database_url=migrated_postgres_url))) as client:
        assert _fit_with(client, "temperature") == 1
        before = client.post("/v1/calibrators/demo/calibrate", json=BATCH)
        assert before.status_code == 200, before.text
        admin = create_engine(migrated_postgres_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            terminated = connection.execute(text(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()) AS killed")).scalar()
        admin.dispose()
        assert terminated >= 2  # the hot path's pooled connection and the sessions' one
        for path in ("/v1/calibrators/demo/calibrate", "/v1/calibrators/demo/versions/1/calibrate"):
            after = client.post(path, json=BATCH)
            assert after.status_code == 200, after.text
            assert after.json()["probabilities"] == before.json()["probabilities"]
        assert _fit_with(client, "temperature") == 2


@pytest.mark.parametrize("tamper", [
    # a digit put in front of the stored temperature (canonical JSON has no spaces)
    "UPDATE calibrator_versions SET params_json = replace(params_json, :old, :new) "
    "WHERE version = 1 AND params_json LIKE :pattern",
    "UPDATE calibrator_versions SET checksum = substr(checksum, 1, 7) || (CASE WHEN substr(checksum, 8, 1) = 'A' "
    "THEN 'B' ELSE 'A' END) || substr(checksum, 9) WHERE version = 1",
    # the digest covers the names served with the parameters too
    "UPDATE calibrator_versions SET class_names = '[\"x\", \"y\", \"z\"]' WHERE version = 1",
])
def test_a_tampered_row_is_refused_not_served(database_url, tamper):
    from starlette.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    settings = Settings(database_url=database_url)
    with TestClient(create_app(settings)) as client:
        assert _fit_with(client, "temperature") == 1 and _fit_with(client, "ensemble_temperature") == 2
    with TestClient(create_app(settings)).app.state.db.write() as session:
        edit = {"old": '"temperature":0.', "new": '"temperature":1.', "pattern": '%"temperature":0.%'}
        assert session.execute(text(tamper), {k: v for k, v in edit.items() if f":{k}" in tamper}).rowcount == 1
    with TestClient(create_app(settings)) as client:  # a fresh process: nothing cached
        for path in ("/v1/calibrators/demo/versions/1/calibrate", "/v2/models/demo/versions/1/infer"):
            body = BATCH if path.startswith("/v1") else {
                "inputs": [{"name": "logits", "shape": [1, 3], "datatype": "FP64", "data": [1.0, 2.0, 3.0]}]}
            refused = client.post(path, json=body)
            said = refused.json()["error" if path.startswith("/v2") else "detail"]
            assert refused.status_code == 500, refused.text
            assert said == "calibrator 'demo' version 1 failed its integrity check: its stored columns (parameters, " \
                           "names, report, ...) do not match their digest; refusing to serve"
        assert client.post("/v1/calibrators/demo/calibrate", json=BATCH).json()["version"] == 2


def _fit_with(client, method: str) -> int:
    body = {"method": method, "logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS}
    response = client.post("/v1/calibrators/demo/versions", json=body)
    assert response.status_code == 201, response.text
    return response.json()["version"]


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_database_without_the_schema_is_503_on_the_hot_path_not_500(kind, request):
    from starlette.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    url = request.getfixturevalue(f"{kind}_url")  # created, not migrated
    missing = "the database schema is missing or behind: run `calibration-service migrate`"
    with TestClient(create_app(Settings(database_url=url))) as client:
        response = client.post("/v1/calibrators/demo/calibrate", json={"logits": [[1.0, 2.0]]})
        assert (response.status_code, response.json()["detail"]) == (503, missing)
        response = client.post("/v2/models/demo/infer", json={"inputs": [
            {"name": "logits", "shape": [1, 2], "datatype": "FP64", "data": [1.0, 2.0]}]})
        assert (response.status_code, response.json()) == (503, {"error": missing})
