"""A comparison fanned out over workers (#18): one ``/v1/compare`` job of the 7 default candidates
x 5 folds on 50000 x 100 (CIFAR-100 WRN-16-4 validation outputs resampled), run by 1, 2 and 4
``calibration-service worker`` processes on Procrastinate, with the comparison as one part job per
fold (``CALIBRATION_JOB_FAN_OUT=auto``) and, for reference, as one job
(``CALIBRATION_JOB_FAN_OUT=off``, 1 worker). Wall time from submission to the job's success, once the workers have
started (``--warmup`` seconds); the cases alternate for ``--rounds`` rounds. Job processes have one
BLAS thread each (``CALIBRATION_JOB_BLAS_THREADS``).

This machine has 2 cores: a third and fourth worker only share them, so 2 workers bound the
speed-up here (the parts are CPU-bound numpy; at most ~2x), and 5 folds bound it everywhere.
Run: ``python benchmarks/fan_out.py [--rows 50000 --workers 1,2,4 --rounds 3]``.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
from sqlalchemy import create_engine, text

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from app.migrate import upgrade  # noqa: E402
from benchmarks._common import environment, write  # noqa: E402
from benchmarks.jobs import ADMIN_URL, ENV, stop  # noqa: E402
from tests.helpers import load_split  # noqa: E402
from tests.service.live import live_server  # noqa: E402


def body(rows: int) -> bytes:
    kind, x, y = load_split("cifar100_wrn16-4", "val")
    picked = np.random.default_rng(0).integers(0, len(y), rows)
    buffer = io.BytesIO()
    np.savez(buffer, **{kind: x[picked], "labels": y[picked]})
    return buffer.getvalue()


def start_workers(url: str, count: int, env: dict) -> subprocess.Popen:
    """``count`` worker processes; they decide whether a comparison fans out (``env``)."""
    return subprocess.Popen([sys.executable, "-m", "app.cli", "worker", "--concurrency", str(count)], cwd=REPO,
                            env={**os.environ, "DATABASE_URL": url, **ENV, **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def run(http: httpx.Client, content: bytes) -> tuple[float, dict, list]:
    start = time.perf_counter()
    response = http.post("/v1/compare", params={"folds": "5"}, content=content,
                         headers={"Content-Type": "application/x-npz", "Prefer": "respond-async"})
    response.raise_for_status()
    while (job := http.get(response.headers["Location"]).json())["status"] in ("queued", "running"):
        time.sleep(0.2)
    seconds = time.perf_counter() - start
    assert job["status"] == "succeeded", job
    parts = [j for j in http.get("/v1/jobs", params={"limit": 200}).json()["jobs"]
             if j["kind"] == "compare-part" and j["created_at"] >= job["created_at"]]
    return seconds, job["result"], parts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=50000)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=8.0, help="seconds for the workers to start")
    args = parser.parse_args()
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"bench_fan_{uuid.uuid4().hex[:8]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    content = body(args.rows)
    rows = []
    try:
        upgrade(url)
        with live_server(url, env=ENV) as base, httpx.Client(base_url=base, timeout=600) as http:
            cases = [("one job", 1, "off")] + [("one part per fold", int(w), "auto")
                                               for w in args.workers.split(",")]
            times: dict[tuple, list[float]] = {case: [] for case in cases}
            details: dict[tuple, tuple] = {}
            for _ in range(args.rounds):  # interleaved: each round runs every case once
                for case in cases:
                    _, count, fan_out = case
                    workers = start_workers(url, count, {"CALIBRATION_JOB_FAN_OUT": fan_out})
                    time.sleep(args.warmup)  # the processes import numpy, scipy and Procrastinate first
                    try:
                        seconds, result, parts = run(http, content)
                    finally:
                        stop(workers)
                    times[case].append(seconds)
                    details[case] = (len(result["methods"]), len({p["worker"] for p in parts}) if parts else 1,
                                     result["selection"]["chosen"]["name"])
                    print(case, f"{seconds:.1f} s", flush=True)
            reference = statistics.median(times[cases[0]])
            for case in cases:
                median = statistics.median(times[case])
                candidates, processes, chosen = details[case]
                spread = f"{median:.1f} ({min(times[case]):.1f}-{max(times[case]):.1f})"
                rows.append([case[0], case[1], candidates, spread, f"{reference / median:.2f}x", processes, chosen])
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    write("fan_out", f"One comparison ({rows[0][2]} default candidates x 5 folds, {args.rows}x100) by worker processes",
          ["comparison as", "worker processes", "candidates", "wall seconds, median (range)", "speed-up vs one job",
           "processes that ran parts", "chosen"], rows, environment(["procrastinate", "numpy"]),
          "2 cores: workers beyond 2 share them. The parent job runs parts too, so one worker never waits.")


if __name__ == "__main__":
    main()
