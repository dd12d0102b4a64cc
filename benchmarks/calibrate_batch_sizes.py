"""Calibrate throughput against the batch size, beside a bare FastAPI app (benchmarks/floor_app.py)
that receives the same bytes, runs the same softmax (float64) and answers float32.

Batches of 64, 512, 4096 and 16384 rows x 1000 classes of float32 logits, sent as ``.npy`` to
``/v1/calibrators/bench/calibrate`` (answer: float32 ``.npy``) and as an Open Inference Protocol
binary tensor to ``/v2/models/bench/infer`` (answer: FP32 binary output); the floor's ``/npy32``
and ``/oip32`` do decode -> softmax(z / T) -> float32 encode on the event loop. The service runs a
temperature-scaling calibrator on SQLite, or with ``--postgres`` on a new database of the local
Postgres server (``CALIBRATION_TEST_POSTGRES_URL``; dropped afterwards), one uvicorn worker each
and the service's default hot-path threads. Load from ``wrk -t1`` with 1 and 8 keep-alive
connections; service and floor alternate (their order swapped every round) for ``--rounds``
rounds (default 3). Reported: the median requests/s of each, and the median of the per-round
ratios service/floor with their range over the rounds. Both servers run with the same fixed glibc allocator thresholds
(``service_latency.ALLOCATOR``).

Run: ``flock /tmp/cpu.lock python benchmarks/calibrate_batch_sizes.py [--seconds 3] [--rounds 3]
[--sizes 64,512,4096,16384] [--connections 1,8] [--postgres]``; the seconds per run grow with the batch
(x1, x1, x1.5, x2) so that a large batch's run still holds tens of requests.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import numpy as np
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._common import cpu_seconds, environment, machine, postgres_database, save  # noqa: E402
from benchmarks.service_latency import start, wait  # noqa: E402
from tests.service.support.live import free_port  # noqa: E402

CLASSES = 1000
STRETCH = {64: 1.0, 512: 1.0, 4096: 1.5, 16384: 2.0}


def fit_bench_calibrator(base: str, rng: np.random.Generator) -> None:
    """Fit the temperature-scaling calibrator ``bench`` that the throughput benchmarks call: 2000 rows
    of float32 logits, 600 of them labelled with their argmax (so that T moves away from 1)."""
    logits = (3 * rng.standard_normal((2000, CLASSES))).astype(np.float32)
    labels = rng.integers(0, CLASSES, 2000)
    labels[:600] = logits[:600].argmax(axis=1)
    archive = io.BytesIO()
    np.savez(archive, logits=logits, labels=labels)
    fitted = httpx.post(f"{base}/v1/calibrators/bench/versions?method=temperature", timeout=300,
                        content=archive.getvalue(), headers={"content-type": "application/x-npz"})
    assert fitted.status_code == 201, fitted.text


def arg(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def wrk(url: str, body: Path, content_type: str, seconds: float, connections: int,
        header_length: int | None, pid: int) -> dict:
    env = {"BODY_FILE": str(body), "CONTENT_TYPE": content_type, "ACCEPT": content_type}
    if header_length is not None:
        env["HEADER_LENGTH"] = str(header_length)
    before = cpu_seconds(pid)
    text = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "60s",
                           "-s", str(REPO / "benchmarks/wrk_post.lua"), url],
                          env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True, check=True).stdout
    requests = int(re.search(r"(\d+) requests in", text).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    timeouts = re.search(r"timeout (\d+)", text)
    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1)), "requests": requests,
            "errors": (int(errors.group(1)) if errors else 0) + (int(timeouts.group(1)) if timeouts else 0),
            "cpu_ms": 1e3 * (cpu_seconds(pid) - before) / max(requests, 1)}


def bodies(workdir: Path, rows: int, rng) -> dict:
    batch = (3 * rng.standard_normal((rows, CLASSES))).astype(np.float32)
    npy = io.BytesIO()
    np.save(npy, batch, allow_pickle=False)
    (workdir / f"{rows}.npy").write_bytes(npy.getvalue())
    header = orjson.dumps({"inputs": [{"name": "logits", "shape": [rows, CLASSES], "datatype": "FP32",
                                       "parameters": {"binary_data_size": batch.nbytes}}],
                           "parameters": {"binary_data_output": True}})
    (workdir / f"{rows}.oip").write_bytes(header + batch.tobytes())
    return {"npy": (workdir / f"{rows}.npy", "application/x-npy", None),
            "v2": (workdir / f"{rows}.oip", "application/octet-stream", len(header))}


def check_answers(base: str, floor: str, files: dict, rows: int) -> None:
    """Both answer float32, of the batch's shape, before anything is timed."""
    path, media, _ = files["npy"]
    for url in (f"{base}/v1/calibrators/bench/calibrate", f"{floor}/npy32"):
        answer = httpx.post(url, content=path.read_bytes(), timeout=120,
                            headers={"content-type": media, "accept": media})
        array = np.load(io.BytesIO(answer.content), allow_pickle=False)
        assert answer.status_code == 200 and array.dtype == np.float32 and array.shape == (rows, CLASSES), url
    path, media, length = files["v2"]
    for url in (f"{base}/v2/models/bench/infer", f"{floor}/oip32"):
        answer = httpx.post(url, content=path.read_bytes(), timeout=120,
                            headers={"content-type": media, "inference-header-content-length": str(length)})
        size = int(answer.headers["inference-header-content-length"])
        output = orjson.loads(answer.content[:size])["outputs"][0]
        assert output["datatype"] == "FP32" and len(answer.content) - size == rows * CLASSES * 4, url


def main():
    if "--postgres" in sys.argv:
        with postgres_database("bench_sizes") as url:
            return run(url)
    return run(None)


def run(database_url: str | None):
    seconds = float(arg("--seconds", "3"))
    rounds = int(arg("--rounds", "3"))
    sizes = [int(s) for s in arg("--sizes", "64,512,4096,16384").split(",")]
    connections = [int(c) for c in arg("--connections", "1,8").split(",")]
    rng = np.random.default_rng(0)
    workdir = Path(tempfile.mkdtemp())
    files = {rows: bodies(workdir, rows, rng) for rows in sizes}
    port, floor_port = free_port(), free_port()
    service = start([sys.executable, "-m", "app.cli", "serve"],
                    {"DATABASE_URL": database_url or f"sqlite:///{workdir}/bench.db", "CALIBRATION_PORT": str(port),
                     "CALIBRATION_WORKERS": "1", "CALIBRATION_LOG_LEVEL": "warning",
                     "CALIBRATION_MAX_BODY_BYTES": str(128 << 20)})
    floor = start([sys.executable, "-m", "uvicorn", "benchmarks.floor_app:app", "--port", str(floor_port),
                   "--workers", "1", "--no-access-log", "--log-level", "warning", "--h11-max-incomplete-event-size",
                   str(128 << 20)], {})
    base, floor_base = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{floor_port}"
    results: dict = {}
    try:
        wait(f"{base}/readyz")
        wait(f"{floor_base}/docs")
        fit_bench_calibrator(base, rng)
        for rows in sizes:
            check_answers(base, floor_base, files[rows], rows)
        targets = {"npy": (f"{base}/v1/calibrators/bench/calibrate", f"{floor_base}/npy32"),
                   "v2": (f"{base}/v2/models/bench/infer", f"{floor_base}/oip32")}
        for round_ in range(rounds):
            for rows in sizes:
                for fmt, (ours, bare) in targets.items():
                    path, media, length = files[rows][fmt]
                    for conns in connections:
                        order = [("service", ours, service.pid), ("floor", bare, floor.pid)]
                        for who, url, pid in order if round_ % 2 == 0 else order[::-1]:
                            run = wrk(url, path, media, seconds * STRETCH.get(rows, 2.0), conns, length, pid)
                            results.setdefault((rows, fmt, conns), {}).setdefault(who, []).append(run)
                            print(rows, fmt, conns, who, run, flush=True)
    finally:
        for process in (service, floor):
            process.terminate()
            process.wait(timeout=30)
    report(results, seconds, rounds, "Postgres" if database_url else "SQLite")


def report(results: dict, seconds: float, rounds: int, database: str) -> None:
    packages = ["fastapi", "uvicorn", "starlette", "numpy"]
    env = environment(packages)
    lines = ["# Calibrate throughput vs batch size: the service against a bare FastAPI app (float32 answers)", "",
             machine(env, packages),
             f"The service on {database}; wrk -t1, {seconds:g} s per run x (1, 1, 1.5, 2) by batch size, "
             f"{rounds} interleaved rounds; "
             "medians; ratio = median of the per-round service/floor ratios [min, max over the rounds].", "",
             "| rows x 1000 | body | conns | service req/s | floor req/s | ratio [range] | service CPU ms/req "
             "| floor CPU ms/req | non-2xx |", "|---|---|---|---|---|---|---|---|---|"]
    for (rows, fmt, conns), runs in results.items():
        ours, bare = runs["service"], runs["floor"]
        ratios = sorted(a["rps"] / b["rps"] for a, b in zip(ours, bare, strict=True))
        lines.append(
            f"| {rows} | {'.npy' if fmt == 'npy' else '/v2 binary'} | {conns} | "
            f"{np.median([r['rps'] for r in ours]):.1f} | {np.median([r['rps'] for r in bare]):.1f} | "
            f"{np.median(ratios):.2f} [{ratios[0]:.2f}, {ratios[-1]:.2f}] | "
            f"{np.median([r['cpu_ms'] for r in ours]):.2f} | {np.median([r['cpu_ms'] for r in bare]):.2f} | "
            f"{sum(r['errors'] for r in ours + bare)} |")
    save("calibrate_batch_sizes.txt" if database == "SQLite" else "calibrate_batch_sizes_postgres.txt", lines)


if __name__ == "__main__":
    main()
