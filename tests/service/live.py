"""A real server: uvicorn in a subprocess, on a free port, against a given database."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.helpers import REPO


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def live_server(database_url: str, workers: int = 1, env: dict | None = None, log_file=None):
    """Start ``calibration-service serve`` (migrations applied) and yield its base URL; its
    output goes to ``log_file`` when given."""
    port = free_port()
    environment = {**os.environ, "DATABASE_URL": database_url, "CALIBRATION_PORT": str(port),
                   "CALIBRATION_WORKERS": str(workers), "CALIBRATION_LOG_LEVEL": "warning", **(env or {})}
    output = open(log_file, "wb") if log_file else subprocess.PIPE  # noqa: SIM115 (closed below)
    process = subprocess.Popen([sys.executable, "-m", "app.cli", "serve"], cwd=REPO, env=environment,
                               stdout=output, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                said = process.stdout.read() if process.stdout else Path(log_file).read_bytes()
                raise RuntimeError(f"server exited: {said.decode()[-2000:]}")
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not become ready in 60 s")
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if log_file:
            output.close()
