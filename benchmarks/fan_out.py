"""Cross-validation fanned out over workers (#18): one ``/v1/compare`` job of the 7 default candidates
x 5 folds on 50000 x 100 (CIFAR-100 WRN-16-4 validation outputs resampled), run by 1, 2 and 4
``calibration-service worker`` processes on Procrastinate, its candidate x fold fits as part jobs
(``CALIBRATION_JOB_FAN_OUT=auto``: one part for one worker, two per worker else, balanced by the
cost model) and, for reference, as one job (``CALIBRATION_JOB_FAN_OUT=off``, 1 worker). With
``--auto``, an ``auto`` fit job on the same data likewise (its cross-validation fans out; its final
refit on all rows does not).

Per case: wall time from submission to the job's success, once the workers have registered with
Procrastinate (and ``--warmup`` seconds more); the CPU seconds the worker processes and the API
process spent meanwhile (from ``/proc``: user + system; Postgres's own CPU is not counted); the
parts and the processes that ran them; the 1-minute load average when it started (this machine is
shared: above 2 the job's processes did not have the 2 cores to themselves). The cases alternate
for ``--rounds`` rounds. Job processes have one BLAS thread each (``CALIBRATION_JOB_BLAS_THREADS``).

This machine has 2 cores, shared with Postgres, the API process and whatever else runs on it: the
ideal speed-up with N workers is min(N, 2)x, and a third and fourth worker only share the 2 cores.
Equal CPU seconds across the cases mean the fan-out conserves the work (what it adds is overhead).
Run: ``flock /tmp/calib-bench.lock python benchmarks/fan_out.py [--rows 50000 --workers 1,2,4 --rounds 3]``.
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
from datetime import datetime
from pathlib import Path

import httpx
import numpy as np
from sqlalchemy import create_engine, text

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from app.platform.migrate import upgrade  # noqa: E402
from benchmarks._common import cpu_seconds, environment, write  # noqa: E402
from benchmarks.jobs import ADMIN_URL, ENV, stop  # noqa: E402
from tests.helpers import load_split  # noqa: E402
from tests.service.support.live import LiveServer  # noqa: E402


def body(rows: int) -> bytes:
    kind, x, y = load_split("cifar100_wrn16-4", "val")
    picked = np.random.default_rng(0).integers(0, len(y), rows)
    buffer = io.BytesIO()
    np.savez(buffer, **{kind: x[picked], "labels": y[picked]})
    return buffer.getvalue()


def start_workers(url: str, count: int, env: dict) -> subprocess.Popen:
    """``count`` worker processes; they decide whether the cross-validation fans out (``env``)."""
    return subprocess.Popen([sys.executable, "-m", "app.cli", "worker", "--concurrency", str(count)], cwd=REPO,
                            env={**os.environ, "DATABASE_URL": url, **ENV, **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def forget_workers(url: str) -> None:
    """Drop the registrations of stopped workers (none runs now): a killed one's row would linger
    for Procrastinate's 30 s and count as live when the next job sizes its parts."""
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(text("DELETE FROM procrastinate_workers"))
    finally:
        engine.dispose()


def registered(url: str, count: int) -> None:
    """Wait until ``count`` workers have registered (they have imported everything by then)."""
    engine = create_engine(url)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with engine.connect() as connection:
                found = connection.execute(text("SELECT count(*) FROM procrastinate_workers")).scalar_one()
            if found >= count:
                return
            time.sleep(0.1)
        raise RuntimeError(f"{count} workers did not register ({found} did)")
    finally:
        engine.dispose()


def run(http: httpx.Client, content: bytes, kind: str, name: str) -> tuple[float, dict, list]:
    start = time.perf_counter()
    if kind == "compare":
        response = http.post("/v1/compare", params={"folds": "5"}, content=content,
                             headers={"Content-Type": "application/x-npz", "Prefer": "respond-async"})
    else:
        response = http.post(f"/v1/calibrators/{name}/versions", params={"method": "auto"}, content=content,
                             headers={"Content-Type": "application/x-npz", "Prefer": "respond-async"})
    response.raise_for_status()
    while (job := http.get(response.headers["Location"]).json())["status"] in ("queued", "running"):
        time.sleep(0.05)
    seconds = time.perf_counter() - start
    assert job["status"] == "succeeded", job
    created = datetime.fromisoformat(job["created_at"])
    parts = [j for j in http.get("/v1/jobs", params={"limit": 500}).json()["jobs"] if j["kind"] == "compare-part"
             and j["calibrator"] == job["calibrator"] and datetime.fromisoformat(j["created_at"]) >= created]
    return seconds, job, parts


def chosen(http: httpx.Client, job: dict) -> str:
    if "selection" in job["result"]:
        return job["result"]["selection"]["chosen"]["name"]
    return job["result"]["parameters"]["chosen"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=50000)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds after the workers have registered")
    parser.add_argument("--auto", action="store_true", help="also an auto fit job, as one job and in parts")
    args = parser.parse_args()
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"bench_fan_{uuid.uuid4().hex[:8]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    content = body(args.rows)
    rows = []
    server = LiveServer(url, env=ENV)
    try:
        upgrade(url)
        base = server.start()
        kinds = ["compare", "auto"] if args.auto else ["compare"]
        cases = [(kind, "one job", 1, "off") for kind in kinds] + [
            (kind, "parts", int(w), "auto") for kind in kinds for w in args.workers.split(",")]
        measured: dict[tuple, list[tuple]] = {case: [] for case in cases}
        with httpx.Client(base_url=base, timeout=600) as http:
            for round_ in range(args.rounds):  # interleaved: each round runs every case once
                for case in cases:
                    kind, _, count, fan_out = case
                    forget_workers(url)
                    workers = start_workers(url, count, {"CALIBRATION_JOB_FAN_OUT": fan_out})
                    try:
                        registered(url, count)
                        time.sleep(args.warmup)
                        load = os.getloadavg()[0]
                        before = cpu_seconds(workers.pid), cpu_seconds(server.process.pid)
                        seconds, job, parts = run(http, content, kind, f"{kind}-{round_}-{count}-{fan_out}")
                        after = cpu_seconds(workers.pid), cpu_seconds(server.process.pid)
                    finally:
                        stop(workers)
                    measured[case].append((seconds, after[0] - before[0], after[1] - before[1], len(parts),
                                           len({p["worker"] for p in parts}) if parts else 1, chosen(http, job), load))
                    print(case, f"{seconds:.1f} s wall, {after[0] - before[0]:.1f} s worker CPU, {len(parts)} parts, "
                          f"load {load:.1f}", flush=True)
        for case in cases:
            kind, label, count, _ = case
            wall = [m[0] for m in measured[case]]
            reference = statistics.median(m[0] for m in measured[(kind, "one job", 1, "off")])
            median = statistics.median(wall)
            rows.append([f"{kind}: {label}", count, f"{median:.1f} ({min(wall):.1f}-{max(wall):.1f})",
                         f"{reference / median:.2f}x", f"{min(count, 2)}x",
                         f"{statistics.median(m[1] for m in measured[case]):.1f}",
                         f"{statistics.median(m[2] for m in measured[case]):.1f}",
                         measured[case][-1][3], max(m[4] for m in measured[case]), measured[case][-1][5],
                         " ".join(f"{m[6]:.1f}" for m in measured[case])])
    finally:
        server.stop()
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    write("fan_out", f"Cross-validation (7 default candidates x 5 folds, {args.rows}x100) by worker processes",
          ["job", "worker processes", "wall seconds, median (range)", "speed-up vs one job",
           "ideal on 2 cores", "worker CPU seconds, median", "API CPU seconds, median", "parts",
           "processes that ran parts", "chosen", "load average at start, by round"], rows,
          environment(["procrastinate", "numpy"]),
          f"{args.rounds} interleaved rounds. 2 cores, shared with Postgres and the API: the ideal speed-up is "
          "min(N, 2)x. The parent job runs parts too, so one worker never waits; with one worker it runs the "
          "cross-validation as one part.")


if __name__ == "__main__":
    main()
