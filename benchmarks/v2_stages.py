"""Where a ``/v2`` binary infer request's CPU goes, in process: the service's ASGI app and the floor's
(``benchmarks/floor_app.py``, ``/oip32``) called directly with the same 64 x 1000 float32 request and
the headers ``wrk_post.lua`` sends, no server and no socket, so what differs is the application's own
work, on uvloop where it is installed (as uvicorn serves). Reported: µs per request of each
(median of ``--repeats`` runs of ``--requests`` requests, with their range), and with ``--profile``
the service's cProfile, by cumulative time. With
``--without-middleware`` also the same service without ``app.http.middleware.RequestMiddleware``
(request id, size limits, body deadline, metrics, access log): what that layer costs a request.

Run: ``flock /tmp/cpu.lock python benchmarks/v2_stages.py [--rows 64] [--requests 2000] [--repeats 7]
[--messages 2] [--profile] [--without-middleware]``.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CLASSES = 1000


def arg(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def request(rows: int, rng) -> tuple[bytes, int]:
    batch = (3 * rng.standard_normal((rows, CLASSES))).astype(np.float32)
    header = orjson.dumps({"inputs": [{"name": "logits", "shape": [rows, CLASSES], "datatype": "FP32",
                                       "parameters": {"binary_data_size": batch.nbytes}}],
                           "parameters": {"binary_data_output": True}})
    return header + batch.tobytes(), len(header)


def scope(path: str, body: bytes, header_length: int) -> dict:
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 50000),
            "headers": [(b"host", b"127.0.0.1:8000"), (b"content-length", str(len(body)).encode()),
                        (b"content-type", b"application/octet-stream"), (b"accept", b"application/octet-stream"),
                        (b"inference-header-content-length", str(header_length).encode())]}


MESSAGES = int(arg("--messages", "2"))


async def call(app, path: str, body: bytes, header_length: int) -> tuple[int, int]:
    """One request through ``app``: its status and the bytes of its answer's body. The body comes
    in ``--messages`` messages (uvicorn handed a 64-row request to the service in 2, in a profile
    under wrk), each a new ``bytes`` as uvicorn's are."""
    sent = {"status": 0, "bytes": 0}
    step = -(-len(body) // MESSAGES)
    messages = [{"type": "http.request", "body": body[start:start + step], "more_body": start + step < len(body)}
                for start in range(0, len(body), step)][::-1]

    async def receive():
        return messages.pop() if messages else {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.start":
            sent["status"] = message["status"]
        else:
            sent["bytes"] += len(message.get("body", b""))

    await app(scope(path, body, header_length), receive, send)
    return sent["status"], sent["bytes"]


async def timed(app, path: str, body: bytes, header_length: int, requests: int) -> float:
    """µs of CPU (this process) per request over ``requests`` requests."""
    start = time.process_time()
    for _ in range(requests):
        await call(app, path, body, header_length)
    return 1e6 * (time.process_time() - start) / requests


async def main():
    rows, requests, repeats = int(arg("--rows", "64")), int(arg("--requests", "2000")), int(arg("--repeats", "7"))
    workdir = Path(tempfile.mkdtemp())
    os.environ.update({"DATABASE_URL": f"sqlite:///{workdir}/stages.db", "CALIBRATION_LOG_LEVEL": "warning",
                       "CALIBRATION_MAX_BODY_BYTES": str(128 << 20)})
    from app.http.middleware import RequestMiddleware
    from app.main import create_app
    from app.platform.migrate import upgrade
    from benchmarks.floor_app import app as floor

    upgrade(os.environ["DATABASE_URL"])
    service = create_app()
    rng = np.random.default_rng(0)
    body, header_length = request(rows, rng)
    async with service.router.lifespan_context(service):
        fit_logits = 3 * rng.standard_normal((2000, CLASSES))
        labels = rng.integers(0, CLASSES, 2000)
        labels[:600] = fit_logits[:600].argmax(axis=1)
        archive = io.BytesIO()
        np.savez(archive, logits=fit_logits.astype(np.float32), labels=labels)
        transport = httpx.ASGITransport(app=service)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            fitted = await client.post("/v1/calibrators/bench/versions?method=temperature", timeout=300,
                                       content=archive.getvalue(), headers={"content-type": "application/x-npz"})
            assert fitted.status_code == 201, fitted.text
        targets = {"service": (service, "/v2/models/bench/infer"), "floor": (floor, "/oip32")}
        if "--without-middleware" in sys.argv:  # the same service without app.http.middleware's layer
            inner = create_app()
            inner.user_middleware = [m for m in inner.user_middleware if m.cls is not RequestMiddleware]
            for name in ("service", "conformal", "hot_path"):  # the fitted calibrator, the same hot path
                setattr(inner.state, name, getattr(service.state, name))
            targets["no-mw"] = (inner, "/v2/models/bench/infer")
        for who, (app, path) in targets.items():
            status, size = await call(app, path, body, header_length)
            assert status == 200 and size > rows * CLASSES * 4, (who, status, size)
            await timed(app, path, body, header_length, requests // 4)  # warm: the hot path learns its cost
        runs: dict[str, list[float]] = {who: [] for who in targets}
        for _ in range(repeats):
            for who, (app, path) in targets.items():
                runs[who].append(await timed(app, path, body, header_length, requests))
        for who, values in runs.items():
            print(f"{who:8s} {np.median(values):7.1f} µs/request [{min(values):.1f}, {max(values):.1f}]")
        gap = [s - f for s, f in zip(runs["service"], runs["floor"], strict=True)]
        print(f"gap      {np.median(gap):7.1f} µs/request [{min(gap):.1f}, {max(gap):.1f}]")
        if "--profile" in sys.argv:
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(requests):
                await call(service, "/v2/models/bench/infer", body, header_length)
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(60)


if __name__ == "__main__":
    try:  # the loop uvicorn runs the servers on where uvloop is installed (timers and tasks cost differently)
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
