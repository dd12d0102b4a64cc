"""Every class of hostile request from the budgets issue, against one live server per database
whose address space is capped (``prlimit --as``), run as deployed (the scheduler on, a worker on
Postgres; its scheduled alarms job must succeed): each is refused with a precise 4xx naming the
limit, ``/readyz`` answers within 1 s throughout, peak memory grows by at most a few body limits,
resident memory comes back near its baseline, and no refused request changes the database."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from sqlalchemy import text

from tests.helpers import make_reference_input
from tests.service.support.bodies import zip_bomb
from tests.service.support.live import LiveServer, database_engine, queue_report

BODY_LIMIT = 8 << 20
ADDRESS_SPACE = 6 << 30  # the server's whole virtual memory, thread stacks and BLAS buffers included
SETTINGS = {"CALIBRATION_MAX_BODY_BYTES": str(BODY_LIMIT), "CALIBRATION_MAX_JSON_BYTES": str(1 << 20),
            "CALIBRATION_MAX_OBSERVATION_ROWS": "1000", "CALIBRATION_MAX_ENTRIES": "1000000",
            "CALIBRATION_MAX_FIT_ENTRIES": "400",
            "MALLOC_ARENA_MAX": "2", "OPENBLAS_NUM_THREADS": "1"}
TABLES = ("calibrators", "calibrator_versions", "aliases", "observation_chunks", "prediction_chunks",
          "logged_predictions", "jobs", "idempotency_keys")
LOGITS, LABELS = make_reference_input(n=200, k=4, seed=5)


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field}")


def _counts(url: str) -> dict[str, int]:
    engine = database_engine(url)
    try:
        with engine.connect() as connection:
            return {t: connection.execute(text(f"SELECT count(*) FROM {t}")).scalar_one() for t in TABLES}
    finally:
        engine.dispose()


V2_HEADER = (b'{"inputs": [{"name": "logits", "shape": [2000, 1000], "datatype": "FP32", '
             b'"parameters": {"binary_data_size": 8000000}}]}')


def v2_binary() -> bytes:
    """A /v2 request with 2000 x 1000 FP32 binary data: under the body limit, over the entries cap."""
    return V2_HEADER + np.zeros((2000, 1000), dtype="<f4").tobytes()


def _fit_body(method: str, logits, labels, **options) -> dict:
    return {"method": method, "options": options, "logits": np.asarray(logits).tolist(),
            "labels": np.asarray(labels).tolist()}


def _cases() -> list[tuple[str, str, str, dict, int, str]]:
    """(what, method, path, request keywords, status, a phrase the answer must hold)."""
    probabilities = (np.exp(LOGITS) / np.exp(LOGITS).sum(1, keepdims=True)).tolist()
    big_json = b'{"probabilities": [' + b",".join([b"[0.25, 0.25, 0.25, 0.25]"] * 60_000) + b'], "labels": []}'
    npz = {"content-type": "application/x-npz"}
    return [
        ("a deflated .npz that inflates to 320 MB", "POST", "/v1/metrics", {"content": zip_bomb(), "headers": npz},
         413, "CALIBRATION_MAX_ARRAY_BYTES"),
        ("an .npz declaring 800 GB", "POST", "/v1/calibrators/m/report",
         {"content": zip_bomb((10**6, 10**5), data_bytes=64), "headers": npz}, 413, "CALIBRATION_MAX_"),
        ("JSON over its cap", "POST", "/v1/metrics",
         {"content": big_json, "headers": {"content-type": "application/json"}}, 413, "CALIBRATION_MAX_JSON_BYTES"),
        ("two million histogram bins", "POST", "/v1/calibrators/h/versions",
         {"json": _fit_body("histogram_binning", LOGITS[:8], LABELS[:8], n_bins=2_000_000)}, 422, "n_bins"),
        ("Dirichlet of 100000 classes on 3 rows", "POST", "/v1/calibrators/d/versions",
         {"json": _fit_body("dirichlet", np.zeros((3, 100_000)), [0, 1, 2])}, 413, "CALIBRATION_MAX_"),
        ("21 auto candidates", "POST", "/v1/calibrators/a/versions",
         {"json": _fit_body("auto", LOGITS, LABELS, candidates=["temperature"] * 21)}, 422, "at most 20"),
        ("probabilities sent as logits", "POST", "/v1/calibrators/p/versions",
         {"json": {"method": "temperature", "logits": probabilities, "labels": LABELS.tolist()}}, 422,
         "look like probabilities"),
        ("a name ending in a newline", "POST", "/v1/calibrators/bad%0A/versions",
         {"json": _fit_body("temperature", LOGITS, LABELS)}, 422, "name"),
        ("a 200-character alias", "PUT", "/v1/calibrators/m/aliases/" + "a" * 200, {"json": {"version": 1}}, 422,
         "alias"),
        ("/v2 shape whose product overflows int64", "POST", "/v2/models/m/infer",
         {"json": {"inputs": [{"name": "logits", "shape": [2**40, 2**40], "datatype": "FP32", "data": [1.0]}]}},
         400, "shape"),
        ("/v2 JSON over its cap", "POST", "/v2/models/m/infer",
         {"json": {"inputs": [{"name": "logits", "shape": [50_000, 4], "datatype": "FP32",
                               "data": [0.125] * 200_000}]}}, 413, "CALIBRATION_MAX_JSON_BYTES"),
        ("/v2 binary tensor over the entries cap", "POST", "/v2/models/m/infer",
         {"content": v2_binary(), "headers": {"inference-header-content-length": str(len(V2_HEADER))}}, 413,
         "CALIBRATION_MAX_ENTRIES"),
        ("/v2 version in non-ASCII digits", "POST", "/v2/models/m/versions/\u0661/infer",
         {"json": {"inputs": []}}, 404, "no model version"),
        ("an append over the per-name cap", "POST", "/v1/calibrators/m/observations",
         {"json": {"logits": np.zeros((900, 4)).tolist(), "labels": [0] * 900}}, 413,
         "CALIBRATION_MAX_OBSERVATION_ROWS"),
        ("a fit reading too many stored observations", "POST", "/v1/calibrators/m/versions",
         {"json": {"method": "temperature", "data": {"observations": {}}}}, 413, "CALIBRATION_MAX_FIT_ENTRIES"),
        ("a label call over the JSON cap", "POST", "/v1/calibrators/m/labels",
         {"json": {"ids": [f"id-{i}" for i in range(150_000)], "labels": [0] * 150_000}}, 413,
         "CALIBRATION_MAX_JSON_BYTES"),
        ("labels outside the serving version's classes", "POST", "/v1/calibrators/m/labels",
         {"json": {"ids": ["served-0"], "labels": [7]}}, 422, "outside [0, 4)"),
        ("prediction ids that do not match the rows", "POST", "/v1/calibrators/m/calibrate",
         {"json": {"logits": LOGITS[:3].tolist(), "ids": ["x"]}}, 422, "1 entries for 3 rows"),
    ]


@pytest.mark.skipif(not Path("/proc/self/status").exists() or not Path("/usr/bin/prlimit").exists(),
                    reason="needs /proc and prlimit")
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_hostile_requests_against_a_memory_capped_server(kind, request, tmp_path):
    url = request.getfixturevalue(f"migrated_{kind}_url")
    server = LiveServer(url, env=SETTINGS, log_file=tmp_path / "server.log", worker=kind == "postgres", migrated=True,
                        command_prefix=["prlimit", f"--as={ADDRESS_SPACE}", "--"])
    base = server.start()
    slowest, probing = [0.0], threading.Event()

    def probe():
        with httpx.Client(base_url=base, timeout=5) as client:
            while not probing.wait(0.1):
                start = time.perf_counter()
                assert client.get("/readyz").status_code == 200
                slowest[0] = max(slowest[0], time.perf_counter() - start)

    try:
        with httpx.Client(base_url=base, timeout=60) as http:
            fitted = http.post("/v1/calibrators/m/versions", json=_fit_body("temperature", LOGITS, LABELS))
            assert fitted.status_code == 201, fitted.text
            http.post("/v1/calibrators/m/observations", json={"logits": LOGITS.tolist(), "labels": LABELS.tolist()})
            http.put("/v1/calibrators/m/logging", json={"sample_rate": 1})
            served = http.post("/v1/calibrators/m/calibrate", json={"logits": LOGITS[:1].tolist(), "ids": ["served-0"]})
            assert served.status_code == 200
            time.sleep(1.5)  # the log's flush
            for _, method, path, keywords, _, _ in _cases():  # once before the measurement: lazy imports and
                http.request(method, path, **keywords)       # first-use caches are not memory a request keeps
            deadline = time.monotonic() + 60  # the scheduler's alarms job for the data above, done
            while not [j for j in http.get("/v1/jobs", params={"calibrator": "m"}).json()["jobs"]
                       if j["kind"] == "alarms" and j["status"] not in ("queued", "running")]:
                assert time.monotonic() < deadline, \
                    f"no scheduled alarms job ran\n{queue_report(url, tmp_path / 'server.log')}"
                time.sleep(0.2)
            pid = server.process.pid
            limits = Path(f"/proc/{pid}/limits").read_text()
            assert f"Max address space         {ADDRESS_SPACE}" in limits  # prlimit ran the server itself
            baseline, peak_before, before = _status(pid, "VmRSS"), _status(pid, "VmHWM"), _counts(url)
            watcher = threading.Thread(target=probe, daemon=True)
            watcher.start()
            for what, method, path, keywords, status, phrase in _cases():
                response = http.request(method, path, **keywords)
                said = response.json().get("detail") or response.json().get("error")
                assert response.status_code == status, f"{what}: {response.status_code} {response.text[:300]}"
                assert phrase in said, f"{what}: {said}"
            probing.set()
            watcher.join()
            grown = _status(pid, "VmHWM") - peak_before
            time.sleep(0.5)
            resident = _status(pid, "VmRSS") - baseline
            assert _counts(url) == before
    finally:
        probing.set()
        server.stop()
    print(f"{kind}: peak grew {grown >> 20} MiB, resident {resident >> 20:+d} MiB, slowest /readyz {slowest[0]:.3f} s")
    assert slowest[0] < 1.0
    assert grown < 4 * BODY_LIMIT, f"peak RSS grew by {grown >> 20} MiB"
    assert resident < 2 * BODY_LIMIT, f"resident memory stayed {resident >> 20} MiB above its baseline"
