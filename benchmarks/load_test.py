"""A bounded load test on loopback: mixed traffic against 2 uvicorn workers on Postgres.

Traffic (``benchmarks/wrk_mixed.lua``): 90% calibrate (64 rows of real CIFAR-10 logits, JSON,
through the alias ``load@production``), 9% report (512 labelled rows), 1% fit (temperature
scaling on 1000 rows, a new version each). The load comes from ``wrk`` (C, one thread,
``--clients`` keep-alive connections): a 10 s warm-up, then ``--seconds`` (default 60)
measured. Every non-2xx answer and every socket error counts as an error. The resident memory
(VmRSS) of each worker is read at the end of the warm-up and every second after; "growth" is
the last reading over the first.

Run: ``python benchmarks/load_test.py [--seconds 60] [--clients 16] [--database-url URL]``
(by default a fresh database on the local Postgres, dropped afterwards; ``wrk`` from Debian).
Writes ``benchmarks/results/load_test.md``; exits 1 on any error or on memory growth above 10%.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import httpx
import numpy as np
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from app.platform.migrate import upgrade  # noqa: E402
from benchmarks._common import environment, write  # noqa: E402
from tests.helpers import load_split  # noqa: E402
from tests.service.support.live import LiveServer  # noqa: E402

MAX_GROWTH = 0.10
BODIES = 32
WARMUP_SECONDS = 10
SCRIPT = REPO / "benchmarks" / "wrk_mixed.lua"


def workers_of(pid: int) -> list[int]:
    """The uvicorn worker processes of a supervisor: its children started by multiprocessing's
    spawn (not its resource tracker)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and b"spawn_main" in (stat.parent / "cmdline").read_bytes():
            found.append(int(stat.parent.name))
    return sorted(found)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def write_bodies(directory: Path, seed: int = 0) -> None:
    """JSON bodies for each kind of call, cut from the real CIFAR-10 test split."""
    _, x, y = load_split("cifar10_resnet50_cross_entropy", "test")
    rng = np.random.default_rng(seed)
    option = orjson.OPT_SERIALIZE_NUMPY
    for i in range(BODIES):
        rows = rng.choice(len(x), 64, replace=False)
        (directory / f"calibrate_{i}.json").write_bytes(orjson.dumps({"logits": x[rows]}, option=option))
        rows = rng.choice(len(x), 512, replace=False)
        (directory / f"report_{i}.json").write_bytes(orjson.dumps({"logits": x[rows], "labels": y[rows]},
                                                                  option=option))
        rows = rng.choice(len(x), 1000, replace=False)
        fit = {"method": "temperature", "logits": x[rows], "labels": y[rows]}
        (directory / f"fit_{i}.json").write_bytes(orjson.dumps(fit, option=option))


def wrk(base: str, seconds: float, clients: int, bodies: Path) -> dict:
    done = subprocess.run(["wrk", "-t1", f"-c{clients}", f"-d{int(seconds)}s", "--timeout", "30s", "-s", str(SCRIPT),
                           base], capture_output=True, text=True, timeout=seconds + 120,
                          env={"BODY_DIR": str(bodies), "BODIES": str(BODIES), "PATH": "/usr/bin:/bin"})
    line = next((line for line in done.stdout.splitlines() if line.startswith("RESULT ")), None)
    if done.returncode or line is None:
        raise RuntimeError(f"wrk failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")
    return json.loads(line[len("RESULT "):])


def run(database_url: str, seconds: float, clients: int, workers: int = 2, warmup: float = WARMUP_SECONDS) -> dict:
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is needed (apt-get install wrk)")
    upgrade(database_url)
    with tempfile.TemporaryDirectory() as directory:
        bodies = Path(directory)
        write_bodies(bodies)
        server = LiveServer(database_url, workers=workers, log_file=bodies / "server.log")
        base = server.start()
        try:
            _, x_val, y_val = load_split("cifar10_resnet50_cross_entropy", "val")
            fit = {"method": "temperature", "logits": x_val.tolist(), "labels": y_val.tolist()}
            assert httpx.post(f"{base}/v1/calibrators/load/versions", json=fit, timeout=60).status_code == 201
            httpx.put(f"{base}/v1/calibrators/load/aliases/production", json={"version": 1}).raise_for_status()
            pids = workers_of(server.process.pid)
            if len(pids) != workers:
                raise RuntimeError(f"expected {workers} worker processes, found {pids}")
            warmed = wrk(base, warmup, clients, bodies)
            memory = {pid: [rss_mib(pid)] for pid in pids}
            stop = threading.Event()

            def sample():
                while not stop.wait(1.0):
                    for pid in pids:
                        memory[pid].append(rss_mib(pid))

            sampler = threading.Thread(target=sample)
            sampler.start()
            try:
                measured = wrk(base, seconds, clients, bodies)
            finally:
                stop.set()
                sampler.join()
            for pid in pids:
                memory[pid].append(rss_mib(pid))
            numbers, token = [], ""
            while token is not None:
                page = httpx.get(f"{base}/v1/calibrators/load-fits/versions?page_size=1000"
                                 + (f"&page_token={token}" if token else "")).json()
                numbers += [version["version"] for version in page["versions"]]
                token = page["next_page_token"]
            numbers.sort()
            if numbers != list(range(1, len(numbers) + 1)):
                raise RuntimeError(f"the fits under load are not numbered 1..n: {numbers}")
            versions = len(numbers)
        finally:
            server.stop()
    return {"warmup": warmed, "measured": measured, "memory": memory, "fit_versions": versions}


def errors(result: dict) -> int:
    return sum(result[key] for key in ("non_2xx", "connect", "read", "write", "timeout"))


def report(result: dict, seconds: float, clients: int) -> tuple[str, list, bool]:
    rows = []
    for phase in ("warmup", "measured"):
        r = result[phase]
        rows.append([phase.replace("warmup", "warm-up"), f"{r['duration_us'] / 1e6:.0f}", r["requests"],
                     f"{r['requests'] / (r['duration_us'] / 1e6):.0f}", errors(r),
                     *(f"{r[key] / 1000:.1f}" for key in ("p50_us", "p90_us", "p99_us", "p999_us", "max_us"))])
    flat, lines = True, []
    for number, samples in enumerate(result["memory"].values(), 1):
        growth = samples[-1] / samples[0] - 1.0
        flat = flat and growth <= MAX_GROWTH
        lines.append(f"- worker {number}: {samples[0]:.1f} MiB after the warm-up, {samples[-1]:.1f} MiB at the end "
                     f"({growth * 100:+.1f}%; highest {max(samples):.1f} MiB)")
    total_errors = errors(result["warmup"]) + errors(result["measured"])
    notes = "\n".join([
        f"{clients} keep-alive connections from wrk (one thread) on loopback, 2 uvicorn workers on Postgres, all "
        f"on this machine. **{total_errors} errors** in {result['warmup']['requests'] + result['measured']['requests']}"
        f" requests; {result['fit_versions']} fits stored as versions 1..{result['fit_versions']}.",
        "", *lines, "",
        "Latencies in milliseconds, measured by wrk (calibrate, report and fit together).",
        f"Run: `python benchmarks/load_test.py --seconds {seconds:g} --clients {clients}`."])
    return notes, rows, total_errors == 0 and flat


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--database-url", help="an empty Postgres database (default: a fresh one, dropped after)")
    args = parser.parse_args()
    drop = None
    if args.database_url is None:
        from tests.service.support.databases import create_postgres_database

        url, drop = create_postgres_database()
    else:
        url = args.database_url
    try:
        result = run(url, args.seconds, args.clients)
    finally:
        if drop:
            drop()
    notes, rows, ok = report(result, args.seconds, args.clients)
    write("load_test", "Load test: 90% calibrate, 9% report, 1% fit (2 workers, Postgres)",
          ["phase", "seconds", "requests", "per second", "errors", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms"],
          rows, environment(["fastapi", "uvicorn", "sqlalchemy", "psycopg"]), notes)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
