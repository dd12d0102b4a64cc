"""Jobs on Procrastinate: wall time of a batch of comparison jobs with 1, 2 and 4 worker
processes, and the API's calibrate throughput while they run against its idle figure.

A fresh Postgres database (the local server), one API process (``CALIBRATION_JOB_ENGINE=
procrastinate``) and ``calibration-service worker --concurrency W``. The batch is ``--jobs``
comparisons (default 6) of 4 candidates x 5 folds on a 10000 x 100 set (CIFAR-100 WRN-16-4
validation outputs, resampled; TS, ETS, EC and IRM); each comparison is one job (candidate x fold fits do not fan
out yet), so the speed-up can only come from jobs running side by side. Calibrate throughput is
``wrk`` on ``/v1/calibrators/{name}/calibrate`` with a 64 x 1000 ``.npy`` batch, 8 connections,
``--seconds`` (default 8), once idle and once while the batch runs with the most workers.

On a 2-core machine, workers beyond 2 share the cores with each other, the API and wrk: 4 workers
cannot beat 2 here, and the figure says so. Run: ``python benchmarks/jobs.py [--jobs 6]``.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import orjson
from sqlalchemy import create_engine, text

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from app.platform.migrate import upgrade  # noqa: E402
from benchmarks._common import environment, write  # noqa: E402
from tests.helpers import load_split  # noqa: E402
from tests.service.support.live import live_server  # noqa: E402

ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
ENV = {"CALIBRATION_JOB_ENGINE": "procrastinate", "CALIBRATION_JOB_QUEUE_LIMIT": "1000"}


METHODS = ["temperature", "ensemble_temperature", "expectation_consistency", "isotonic_multiclass"]


def comparison_body(seed: int) -> bytes:
    kind, x, y = load_split("cifar100_wrn16-4", "val")
    rows = np.random.default_rng(seed).integers(0, len(y), 10_000)
    return orjson.dumps({kind: x[rows], "labels": y[rows], "methods": METHODS, "folds": 5},
                        option=orjson.OPT_SERIALIZE_NUMPY)


def submit(http: httpx.Client, body: bytes) -> str:
    response = http.post("/v1/compare", content=body,
                         headers={"Content-Type": "application/json", "Prefer": "respond-async"})
    response.raise_for_status()
    return response.headers["Location"]


def run_batch(http: httpx.Client, bodies: list[bytes]) -> float:
    start = time.perf_counter()
    locations = [submit(http, body) for body in bodies]
    for location in locations:
        while (job := http.get(location).json())["status"] in ("queued", "running"):
            time.sleep(0.2)
        assert job["status"] == "succeeded", job
    return time.perf_counter() - start


def wrk(base: str, body: Path, seconds: int) -> float:
    script = body.with_suffix(".lua")
    script.write_text(f'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/x-npy"\n'
                      f'local f = io.open("{body}", "rb")\nwrk.body = f:read("*all")\nf:close()\n')
    out = subprocess.run(["wrk", "-t1", "-c8", f"-d{seconds}s", "-s", str(script),
                          f"{base}/v1/calibrators/bench/calibrate"], capture_output=True, text=True).stdout
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def start_workers(url: str, count: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "app.cli", "worker", "--concurrency", str(count)], cwd=REPO,
                            env={**os.environ, "DATABASE_URL": url, **ENV}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def stop(workers: subprocess.Popen) -> None:
    os.killpg(workers.pid, signal.SIGTERM)
    workers.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=6)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--workers", default="1,2,4")
    args = parser.parse_args()
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"bench_jobs_{uuid.uuid4().hex[:8]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    bodies = [comparison_body(seed) for seed in range(args.jobs)]
    batch = np.random.default_rng(0).normal(size=(64, 1000)).astype(np.float32)
    rows, notes = [], []
    try:
        upgrade(url)
        with live_server(url, env=ENV) as base, httpx.Client(base_url=base, timeout=120) as http, \
                tempfile.TemporaryDirectory() as scratch:
            logits = np.random.default_rng(1).normal(size=(2000, 1000))
            fit_body = io.BytesIO()
            np.savez(fit_body, logits=logits, labels=np.random.default_rng(2).integers(0, 1000, len(logits)))
            http.post("/v1/calibrators/bench/versions", params={"method": "temperature"}, content=fit_body.getvalue(),
                      headers={"Content-Type": "application/x-npz"}).raise_for_status()
            npy = Path(scratch) / "batch.npy"
            np.save(npy, batch)
            idle = wrk(base, npy, args.seconds)
            baseline = None
            for count in [int(w) for w in args.workers.split(",")]:
                workers = start_workers(url, count)
                try:
                    seconds = run_batch(http, bodies)
                finally:
                    stop(workers)
                baseline = baseline or seconds
                rows.append([count, f"{seconds:.1f}", f"{baseline / seconds:.2f}x"])
            workers = start_workers(url, max(int(w) for w in args.workers.split(",")))
            try:
                locations = [submit(http, body) for body in bodies * 4]  # enough work to outlast wrk
                time.sleep(2)
                busy = wrk(base, npy, args.seconds)
                unfinished = sum(http.get(location).json()["status"] in ("queued", "running")
                                 for location in locations)
            finally:
                stop(workers)
            notes.append(f"Calibrate 64x1000 .npy, 8 connections: idle {idle:.0f} req/s, while the batch runs "
                         f"{busy:.0f} req/s ({busy / idle:.0%} of idle); {unfinished} of {len(locations)} jobs were "
                         "still queued or running when wrk stopped.")
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    write("jobs", f"{args.jobs} comparison jobs (4 candidates x 5 folds, 10000x100) by worker processes",
          ["worker processes", "wall seconds", "speed-up"], rows, environment(["procrastinate", "numpy"]),
          "\n".join(notes))


if __name__ == "__main__":
    main()
