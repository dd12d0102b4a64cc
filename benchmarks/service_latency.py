"""Latency and throughput of /calibrate for a 64 x 1000 batch, JSON and binary (.npy), with 1 and
2 uvicorn workers and 1, 8 and 32 connections, against two floors (benchmarks/floor_app.py: a
bare FastAPI endpoint doing only decode -> softmax -> encode, on the event loop, and the same on
FastAPI's thread pool). The service runs a tiny call on the event loop too, and a larger one on
its own threads (app/http/hot_path.py). Load from ``wrk`` (Debian package) on loopback: one
thread, ``--connections`` keep-alive connections (default 1, 8 and 32; with 2 workers, fewer than
32 can all land on one worker), ``--seconds`` per run (default 8). The calibrator is temperature
scaling on SQLite, so each call also resolves the version in the database. The three servers
alternate for ``--rounds`` rounds (default 3) per case; medians and the median ratios (with their
range over the rounds) are reported, of requests per second and of the server's CPU time per
request (its process tree, from /proc; the ratio is the floor's over ours: what the throughput
ratio becomes once the cores are the bound, steadier than req/s on a shared machine).

Every server runs with the same fixed glibc allocator thresholds (``ALLOCATOR``): with glibc's
default dynamic mmap threshold, the on-loop floor's speed swings by 2x from run to run on this
machine (435 to 1083 req/s seen for the same binary case), as 512 KB temporaries are either
reused or mapped and faulted in afresh.

Run: ``python benchmarks/service_latency.py [--seconds 8] [--workers 1,2] [--connections 1,8,32]
[--rounds 3]``.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._common import cpu_seconds, environment, write  # noqa: E402
from tests.service.support.live import free_port  # noqa: E402


def wait(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(64 << 20)}


def start(command: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(command, cwd=REPO, env={**os.environ, **ALLOCATOR, **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_wrk(url: str, body: Path, content_type: str, accept: str, seconds: int, connections: int = 32,
            env: dict | None = None) -> dict:
    result = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(REPO / "benchmarks/wrk_post.lua"),
         url],
        env={**os.environ, "BODY_FILE": str(body), "CONTENT_TYPE": content_type, "ACCEPT": accept, **(env or {})},
        capture_output=True, text=True, check=True)
    text = result.stdout

    def millis(label):
        match = re.search(rf"{label}%\s+([\d.]+)(us|ms|s)", text)
        value, unit = float(match.group(1)), match.group(2)
        return value * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]

    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1)),
            "requests": int(re.search(r"(\d+) requests in", text).group(1)),
            "p50": millis("50"), "p99": millis("99"), "errors": int(errors.group(1)) if errors else 0}


ROUNDS = 3


def timed_run(pid: int, *wrk_args) -> dict:
    """A wrk run with the server's CPU time per request (its process tree, over the run)."""
    before = cpu_seconds(pid)
    result = run_wrk(*wrk_args)
    return {**result, "cpu_us": 1e6 * (cpu_seconds(pid) - before) / max(result["requests"], 1)}


def main():
    seconds = int(sys.argv[sys.argv.index("--seconds") + 1]) if "--seconds" in sys.argv else 8
    worker_counts = [int(w) for w in sys.argv[sys.argv.index("--workers") + 1].split(",")] \
        if "--workers" in sys.argv else [1, 2]
    connection_counts = [int(c) for c in sys.argv[sys.argv.index("--connections") + 1].split(",")] \
        if "--connections" in sys.argv else [1, 8, 32]
    rounds_count = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else ROUNDS
    rng = np.random.default_rng(0)
    fit_logits = (3 * rng.standard_normal((2000, 1000))).astype(np.float32)
    fit_labels = rng.integers(0, 1000, 2000)
    fit_labels[:600] = fit_logits[:600].argmax(axis=1)
    batch = (3 * rng.standard_normal((64, 1000))).astype(np.float32)
    workdir = Path(tempfile.mkdtemp())
    json_body = workdir / "batch.json"
    json_body.write_bytes(orjson.dumps({"logits": batch}, option=orjson.OPT_SERIALIZE_NUMPY))
    npy_body = workdir / "batch.npy"
    buffer = io.BytesIO()
    np.save(buffer, batch, allow_pickle=False)
    npy_body.write_bytes(buffer.getvalue())
    rows = []
    for workers in worker_counts:
        port = free_port()
        ours = start([sys.executable, "-m", "app.cli", "serve"],
                     {"DATABASE_URL": f"sqlite:///{workdir}/bench-{workers}.db", "CALIBRATION_PORT": str(port),
                      "CALIBRATION_WORKERS": str(workers), "CALIBRATION_LOG_LEVEL": "warning"})
        floor_port = free_port()
        floor = start([sys.executable, "-m", "uvicorn", "benchmarks.floor_app:app", "--port", str(floor_port),
                       "--workers", str(workers), "--no-access-log", "--log-level", "warning"], {})
        try:
            base, floor_base = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{floor_port}"
            wait(f"{base}/readyz")
            wait(f"{floor_base}/docs")
            archive = io.BytesIO()  # as .npz: the JSON would be over CALIBRATION_MAX_JSON_BYTES
            np.savez(archive, logits=fit_logits, labels=fit_labels)
            fitted = httpx.post(f"{base}/v1/calibrators/bench/versions?method=temperature", timeout=120,
                                content=archive.getvalue(), headers={"content-type": "application/x-npz"})
            while fitted.status_code == 202 or fitted.json().get("status") in ("queued", "running"):
                time.sleep(0.5)  # a loaded machine's fit can be a job
                fitted = httpx.get(f"{base}{fitted.headers.get('Location') or fitted.url.path}", timeout=30)
            assert fitted.status_code in (200, 201) and fitted.json().get("status", "succeeded") == "succeeded", \
                fitted.text
            probe = httpx.post(f"{base}/v1/calibrators/bench/calibrate", content=npy_body.read_bytes(), timeout=30,
                               headers={"content-type": "application/x-npy"})
            assert probe.status_code == 200, probe.text
            cases = [
                ("JSON", f"{base}/v1/calibrators/bench/calibrate", f"{floor_base}/json", json_body,
                 "application/json", "application/json"),
                ("binary .npy", f"{base}/v1/calibrators/bench/calibrate", f"{floor_base}/npy", npy_body,
                 "application/x-npy", "application/x-npy"),
            ]
            servers = [("floor, on the event loop", ""), ("floor, on the thread pool", "-threaded"),
                       ("ours /v1 calibrate", None)]
            for connections in connection_counts:
                for name, url, floor_url, body, content_type, accept in cases:
                    # the servers alternate over several rounds: this machine's speed drifts by
                    # tens of percent over minutes, so only interleaved ratios are comparable
                    rounds = [[timed_run(ours.pid if suffix is None else floor.pid,
                                         url if suffix is None else floor_url + suffix, body, content_type,
                                         accept, seconds, connections)
                               for _, suffix in servers] for _ in range(rounds_count)]
                    for index, (who, _) in enumerate(servers):
                        results = [r[index] for r in rounds]
                        rows.append([workers, connections, name, who, f"{np.median([r['rps'] for r in results]):.0f}",
                                     f"{np.median([r['cpu_us'] for r in results]):.0f}",
                                     f"{np.median([r['p50'] for r in results]):.2f}",
                                     f"{np.median([r['p99'] for r in results]):.2f}",
                                     sum(r["errors"] for r in results)])
                    for index, (who, _) in enumerate(servers[:2]):
                        ratios = sorted(r[2]["rps"] / r[index]["rps"] for r in rounds)
                        cpu = sorted(r[index]["cpu_us"] / r[2]["cpu_us"] for r in rounds)
                        rows.append([workers, connections, name, f"ours / {who}, median of rounds (range)",
                                     f"**{np.median(ratios):.0%}** ({ratios[0]:.0%}-{ratios[-1]:.0%})",
                                     f"{np.median(cpu):.0%} ({cpu[0]:.0%}-{cpu[-1]:.0%})", "", "", ""])
        finally:
            for process in (ours, floor):
                process.terminate()
                process.wait(timeout=20)
    write("service_latency", f"/calibrate, 64 x 1000 float32 logits, wrk -t1 -c{'/'.join(map(str, connection_counts))} "
          f"on loopback, {rounds_count} interleaved rounds of {seconds} s",
          ["workers", "connections", "payload", "server", "req/s", "server CPU us/request (ratio: floor's / ours)",
           "p50 ms", "p99 ms", "non-2xx"], rows,
          environment(["fastapi", "uvicorn", "orjson", "numpy"]),
          f"Client and server share the machine's 2 cores (load average {os.getloadavg()[0]:.1f} at the "
          "end); ratios of interleaved rounds are the comparable figure. With 2 workers "
          "the 32 keep-alive connections are split between the workers by asyncio's accept loop, which can "
          "hand most of them to one worker: 2-worker figures vary with that split. Every server runs with "
          "the same fixed glibc allocator thresholds (MALLOC_MMAP_THRESHOLD_ 32 MiB, MALLOC_TRIM_THRESHOLD_ "
          "64 MiB); with glibc's dynamic defaults the event-loop floor's speed swings by 2x between runs.")


if __name__ == "__main__":
    main()
