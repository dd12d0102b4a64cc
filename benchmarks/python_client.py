"""/calibrate driven by an ordinary Python client (httpx), beside the bare FastAPI floor
(``benchmarks/floor_app.py``'s ``/npy32``: the same bytes in, the same softmax in float64, a
float32 ``.npy`` out).

Both servers get the same driver: a 64 x 1000 float32 ``.npy`` body with ``Content-Type`` and
``Accept: application/x-npy`` and httpx's own default headers (``Accept-Encoding``,
``User-Agent``, keep-alive). With 1 connection one ``httpx.Client`` sends requests back to back;
with 8 and 32, ``httpx.AsyncClient`` (a pool of that many connections) keeps that many requests in
flight on one asyncio loop. The project's own client (what users call: it encodes the array and
decodes the answer) runs against the service too, with the same drivers: ``Client.calibrate`` back
to back at 1 connection, 8 and 32 threads with a ``Client`` each, one ``AsyncClient`` with 8 and 32
calls in flight; its ratio is to the floor driven by plain httpx with the same driver, so it also
counts the client's own encode and decode. ``--baseline DIR`` adds the same rows for the
``calibration_client`` of another checkout (e.g. ``git worktree add /tmp/base main``), loaded as a
package of its own, in the same interleaved rounds: old and new client side by side.
The service runs a temperature-scaling calibrator on SQLite, one uvicorn worker and its default
hot-path threads; the floor one uvicorn worker; both with the same fixed glibc allocator
thresholds (``service_latency.ALLOCATOR``). Service and floor alternate (order swapped every
round) for ``--rounds`` rounds (default 3) of ``--seconds`` each (default 3). Reported: medians
and ranges of req/s, the median of the per-round service/floor ratios with their range, and the
server's CPU ms a request (its process tree, from /proc) and the client's (this process).

The client is Python and runs on the same machine as the server: at 1 connection its time is
part of every request's round trip, and with many connections it competes for the cores.

Each run's table is appended to ``benchmarks/results/python_client.md`` (earlier runs are kept).

Run: ``flock /tmp/cpu.lock python benchmarks/python_client.py [--seconds 3] [--rounds 3]
[--connections 1,8,32] [--drivers threads,async] [--baseline DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.util
import io
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import calibration_client  # noqa: E402
from benchmarks._common import RESULTS, cpu_seconds, environment, machine, save  # noqa: E402
from benchmarks.calibrate_batch_sizes import fit_bench_calibrator  # noqa: E402
from benchmarks.service_latency import start, wait  # noqa: E402
from tests.service.support.live import free_port  # noqa: E402

CLASSES = 1000
NPY = "application/x-npy"
HEADERS = {"content-type": NPY, "accept": NPY}


def one_connection(url: str, body: bytes, seconds: float) -> tuple[int, int]:
    """Requests sent back to back on one ``httpx.Client`` for ``seconds``: (answered, non-200)."""
    done = errors = 0
    with httpx.Client(timeout=60) as client:
        client.post(url, content=body, headers=HEADERS)  # the connection, before the clock
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            response = client.post(url, content=body, headers=HEADERS)
            done += 1
            errors += response.status_code != 200
    return done, errors


def many_connections(url: str, body: bytes, seconds: float, connections: int) -> tuple[int, int]:
    """``connections`` requests kept in flight on one ``httpx.AsyncClient`` for ``seconds``."""
    async def drive() -> tuple[int, int]:
        counts = [0, 0]
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            await asyncio.gather(*(client.post(url, content=body, headers=HEADERS) for _ in range(connections)))
            end = time.perf_counter() + seconds

            async def worker():
                while time.perf_counter() < end:
                    response = await client.post(url, content=body, headers=HEADERS)
                    counts[0] += 1
                    counts[1] += response.status_code != 200
            await asyncio.gather(*(worker() for _ in range(connections)))
        return counts[0], counts[1]
    return asyncio.run(drive())


def threads(url: str, body: bytes, seconds: float, connections: int) -> tuple[int, int]:
    """``connections`` threads, each sending back to back on its own ``httpx.Client``, for ``seconds``."""
    counts = [[0, 0] for _ in range(connections)]
    clients = [httpx.Client(timeout=60) for _ in range(connections)]
    for client in clients:
        client.post(url, content=body, headers=HEADERS)  # the connections, before the clock
    end = time.perf_counter() + seconds

    def worker(index: int) -> None:
        while time.perf_counter() < end:
            response = clients[index].post(url, content=body, headers=HEADERS)
            counts[index][0] += 1
            counts[index][1] += response.status_code != 200
    run_threads(clients, worker)
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


def run_threads(clients: list, worker) -> None:
    """``worker(i)`` on a thread of its own for each of ``clients``, all joined; then the clients closed."""
    pool = [threading.Thread(target=worker, args=(index,)) for index in range(len(clients))]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    for client in clients:
        client.close()


def client_package(checkout: str):
    """The ``calibration_client`` package of another checkout, imported under a name of its own."""
    name = "baseline_calibration_client"
    folder = Path(checkout).resolve() / "calibration_client"
    spec = importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)
    return package


def project_client(package, base: str, batch: np.ndarray, seconds: float) -> tuple[int, int]:
    """``package.Client.calibrate`` back to back for ``seconds`` (float32 answers)."""
    done = 0
    with package.Client(base) as client:
        client.calibrate("bench", batch)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            answer = client.calibrate("bench", batch)
            done += 1
    assert answer.dtype == np.float32 and answer.shape == batch.shape
    return done, 0


def project_threads(package, base: str, batch: np.ndarray, seconds: float, connections: int) -> tuple[int, int]:
    """``connections`` threads, each calling ``Client.calibrate`` back to back on its own ``Client``."""
    counts = [0] * connections
    clients = [package.Client(base) for _ in range(connections)]
    for client in clients:
        client.calibrate("bench", batch)  # the connections, before the clock
    end = time.perf_counter() + seconds

    def worker(index: int) -> None:
        while time.perf_counter() < end:
            answer = clients[index].calibrate("bench", batch)
            counts[index] += 1
        assert answer.dtype == np.float32 and answer.shape == batch.shape
    run_threads(clients, worker)
    return sum(counts), 0


def project_async(package, base: str, batch: np.ndarray, seconds: float, connections: int) -> tuple[int, int]:
    """One ``AsyncClient`` (a pool of ``connections``) with ``connections`` calibrate calls in flight."""
    async def drive() -> int:
        done = [0]
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        async with package.AsyncClient(base, limits=limits) as client:
            await asyncio.gather(*(client.calibrate("bench", batch) for _ in range(connections)))
            end = time.perf_counter() + seconds

            async def worker():
                while time.perf_counter() < end:
                    answer = await client.calibrate("bench", batch)
                    done[0] += 1
                assert answer.dtype == np.float32 and answer.shape == batch.shape
            await asyncio.gather(*(worker() for _ in range(connections)))
        return done[0]
    return asyncio.run(drive()), 0


def timed(pid: int, drive) -> dict:
    """A run of ``drive()``, with the server's CPU time (process tree) and this process's per request."""
    import resource

    def own():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    server, client, start_ = cpu_seconds(pid), own(), time.perf_counter()
    done, errors = drive()
    elapsed = time.perf_counter() - start_
    n = max(done, 1)
    return {"rps": done / elapsed, "errors": errors, "server_ms": 1e3 * (cpu_seconds(pid) - server) / n,
            "client_ms": 1e3 * (own() - client) / n}


def check_answers(base: str, floor: str, body: bytes) -> None:
    """Both answer a float32 array of the batch's shape (their temperatures differ: the floor's is fixed)."""
    answers = []
    for url in (f"{base}/v1/calibrators/bench/calibrate", f"{floor}/npy32"):
        response = httpx.post(url, content=body, headers=HEADERS, timeout=60)
        assert response.status_code == 200, response.text
        answers.append(np.load(io.BytesIO(response.content), allow_pickle=False))
        assert answers[-1].dtype == np.float32 and answers[-1].shape == (64, CLASSES), url


def main() -> None:
    parser = argparse.ArgumentParser(description="/calibrate driven by httpx and the project's client, beside "
                                     "the bare FastAPI floor (this module's docstring says how)")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of service and floor")
    parser.add_argument("--connections", default="1,8,32", help="comma-separated connection counts")
    parser.add_argument("--drivers", default="threads,async", help="threads, async or both")
    parser.add_argument("--baseline", default="", help="another checkout whose client runs beside this one")
    options = parser.parse_args()
    seconds, rounds, baseline = options.seconds, options.rounds, options.baseline
    connections = [int(c) for c in options.connections.split(",")]
    drivers = options.drivers.split(",")
    rng = np.random.default_rng(0)
    batch = (3 * rng.standard_normal((64, CLASSES))).astype(np.float32)
    buffer = io.BytesIO()
    np.save(buffer, batch, allow_pickle=False)
    body = buffer.getvalue()
    workdir = Path(tempfile.mkdtemp())
    port, floor_port = free_port(), free_port()
    service = start([sys.executable, "-m", "app.cli", "serve"],
                    {"DATABASE_URL": f"sqlite:///{workdir}/bench.db", "CALIBRATION_PORT": str(port),
                     "CALIBRATION_WORKERS": "1", "CALIBRATION_LOG_LEVEL": "warning"})
    floor = start([sys.executable, "-m", "uvicorn", "benchmarks.floor_app:app", "--port", str(floor_port),
                   "--workers", "1", "--no-access-log", "--log-level", "warning"], {})
    base, floor_base = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{floor_port}"
    ours, bare = f"{base}/v1/calibrators/bench/calibrate", f"{floor_base}/npy32"
    results: dict = {}
    try:
        wait(f"{base}/readyz")
        wait(f"{floor_base}/docs")
        fit_bench_calibrator(base, rng)
        check_answers(base, floor_base, body)

        def driver(url: str, conns: int, name: str):
            if conns == 1:
                return lambda: one_connection(url, body, seconds)
            if name == "threads":
                return lambda: threads(url, body, seconds, conns)
            return lambda: many_connections(url, body, seconds, conns)
        labels = {"async": "httpx.AsyncClient", "threads": "httpx.Client a thread"}
        cases = [(f"{labels[name] if c > 1 else 'httpx.Client'}, {c}",
                  [("service", service.pid, driver(ours, c, name)), ("floor", floor.pid, driver(bare, c, name))])
                 for c in connections for name in (drivers if c > 1 else drivers[:1])]
        packages = [("", calibration_client)] + ([(" (baseline)", client_package(baseline))] if baseline else [])
        for suffix, package in packages:
            for c in connections:
                for name in drivers if c > 1 else drivers[:1]:
                    if c == 1:
                        case, drive = "Client.calibrate", (lambda p=package: project_client(p, base, batch, seconds))
                    elif name == "threads":
                        case, drive = "Client.calibrate a thread", (
                            lambda p=package, c=c: project_threads(p, base, batch, seconds, c))
                    else:
                        case, drive = "AsyncClient.calibrate", (
                            lambda p=package, c=c: project_async(p, base, batch, seconds, c))
                    cases.append((f"{case}{suffix}, {c}",
                                  [("service", service.pid, drive), ("floor", floor.pid, driver(bare, c, name))]))
        for round_ in range(rounds):
            for case, order in cases:
                for who, pid, drive in order if round_ % 2 == 0 else order[::-1]:
                    run = timed(pid, drive)
                    results.setdefault(case, {}).setdefault(who, []).append(run)
                    print(round_, case, who, {k: round(v, 3) for k, v in run.items()}, flush=True)
    finally:
        for process in (service, floor):
            process.terminate()
            process.wait(timeout=30)
    report(results, seconds, rounds, baseline)


def report(results: dict, seconds: float, rounds: int, baseline: str) -> None:
    packages = ["httpx", "httpcore", "fastapi", "uvicorn", "starlette", "numpy"]
    env = environment(packages)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    if baseline:
        commit += (", baseline: " + subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=baseline,
                                                   capture_output=True, text=True).stdout.strip())
    lines = [f"## {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, commit {commit}", "",
             machine(env, packages),
             f"64 x 1000 float32 .npy in, float32 .npy out; the service on SQLite, 1 worker each; {seconds:g} s a run, "
             f"{rounds} interleaved rounds; medians [ranges]; ratio = median of the per-round service/floor ratios. "
             "The client (this Python process) shares the machine's cores with the servers. Client.calibrate rows: "
             "the project's client against the service, the floor driven by plain httpx with the same driver.", "",
             "| client, connections | service req/s | floor req/s | ratio [range] | service CPU ms/req | "
             "floor CPU ms/req | client CPU ms/req (service / floor) | non-200 |",
             "|---|---|---|---|---|---|---|---|"]

    def spread(values, fmt):
        values = sorted(values)
        return f"{statistics.median(values):{fmt}} [{values[0]:{fmt}}, {values[-1]:{fmt}}]"
    for case, runs in results.items():
        ours, floor = runs["service"], runs["floor"]
        ratios = [a["rps"] / b["rps"] for a, b in zip(ours, floor, strict=True)]
        lines.append(
            f"| {case} | {spread([r['rps'] for r in ours], '.0f')} | {spread([r['rps'] for r in floor], '.0f')} | "
            f"**{spread(ratios, '.2f')}** | {statistics.median(r['server_ms'] for r in ours):.2f} | "
            f"{statistics.median(r['server_ms'] for r in floor):.2f} | "
            f"{statistics.median(r['client_ms'] for r in ours):.2f} / "
            f"{statistics.median(r['client_ms'] for r in floor):.2f} | "
            f"{sum(r['errors'] for r in ours + floor)} |")
    kept = RESULTS / "python_client.md"
    earlier = (kept.read_text().rstrip("\n").split("\n") if kept.exists()
               else ["# /calibrate with a Python client (httpx): the service against a bare FastAPI app"])
    save("python_client.md", [*earlier, "", *lines])


if __name__ == "__main__":
    main()
