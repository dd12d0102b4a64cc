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


class LiveServer:
    """``calibration-service serve`` (migrations applied) in a subprocess on a free port; its
    output goes to ``log_file`` when given."""

    def __init__(self, database_url: str, workers: int = 1, env: dict | None = None, log_file=None,
                 command_prefix: list[str] | None = None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_file = log_file
        self.environment = {**os.environ, "DATABASE_URL": database_url, "CALIBRATION_PORT": str(self.port),
                            "CALIBRATION_WORKERS": str(workers), "CALIBRATION_LOG_LEVEL": "warning", **(env or {})}
        self.process: subprocess.Popen | None = None
        self.command_prefix = command_prefix or []  # e.g. ["prlimit", "--as=...", "--"]

    def start(self) -> str:
        self.output = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen([*self.command_prefix, sys.executable, "-m", "app.cli", "serve"], cwd=REPO,
                                        env=self.environment,
                                        stdout=self.output, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                said = Path(self.log_file).read_bytes().decode()[-2000:] if self.log_file else ""
                raise RuntimeError(f"server exited with {self.process.returncode}: {said}")
            try:
                if httpx.get(f"{self.base}/readyz", timeout=1).status_code == 200:
                    return self.base
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not become ready in 60 s")
            time.sleep(0.1)

    def stop(self, kill: bool = False) -> None:
        """Terminate (SIGTERM, a graceful shutdown) or kill (SIGKILL, a crash) the server."""
        if self.process is None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None
        if self.log_file:
            self.output.close()


@contextmanager
def live_server(database_url: str, workers: int = 1, env: dict | None = None, log_file=None):
    """A started ``LiveServer``'s base URL, stopped on exit."""
    server = LiveServer(database_url, workers, env, log_file)
    try:
        yield server.start()
    finally:
        server.stop()
