"""A real server: uvicorn in a subprocess, on a free port, against a given database, run as
deployed: the scheduler (drift-monitor jobs, refit policies, webhook deliveries) and retention on,
as by default, at short intervals (``DEPLOYED``) so that they run within a test; with
``worker=True`` a ``calibration-service worker`` beside it, as docker-compose starts one (jobs on
Postgres go to the Procrastinate queue), as one worker process (``--concurrency 1``), not one per
core: the same on any machine; the job and fan-out tests start several (``procrastinate`` in
tests/service/live/conftest.py). A job that ended ``failed`` fails the test when the server stops,
unless the test expects it (``expect_failed_jobs``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import Engine

from app.platform.db import normalise_url
from tests.helpers import REPO

# the defaults have the scheduler and retention on (every 60 s and every hour); here every 1 s and 5 s
# one process in the embedded job pool, not the default two: each process of it imports the job code
# (~1.2 CPU-s) and two overlapping jobs (a scheduler's alarms jobs) start the second; a test that needs
# two jobs at once sets CALIBRATION_JOB_PROCESSES itself
DEPLOYED = {"CALIBRATION_SCHEDULE_SECONDS": "1", "CALIBRATION_RETENTION_INTERVAL_SECONDS": "5",
            "CALIBRATION_JOB_PROCESSES": "1"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_engine(database_url: str) -> Engine:
    """A SQLAlchemy engine on ``database_url`` as the service names the driver (``normalise_url``)."""
    return create_engine(normalise_url(database_url))


def failed_jobs(database_url: str) -> list[dict]:
    """The jobs of the database that ended ``failed`` (none where it has no jobs table)."""
    engine = database_engine(database_url)
    try:
        if not inspect(engine).has_table("jobs"):
            return []
        with engine.connect() as connection:
            return [dict(row) for row in connection.execute(text(
                "SELECT id, kind, calibrator, error FROM jobs WHERE status = 'failed'")).mappings()]
    finally:
        engine.dispose()


def queue_report(database_url: str, log_file=None) -> str:
    """What a test that waited in vain for a job prints: our jobs (kind, status, times), Procrastinate's
    jobs and workers (heartbeats), and the tail of the server's and worker's log."""
    lines = []
    engine = database_engine(database_url)
    try:
        tables = set(inspect(engine).get_table_names())
        queries = [("jobs", "SELECT kind, status, created_at, started_at, finished_at, error FROM jobs "
                            "ORDER BY created_at")]
        if "procrastinate_jobs" in tables:
            queries += [("procrastinate_jobs", "SELECT id, status, attempts, scheduled_at, worker_id "
                                               "FROM procrastinate_jobs ORDER BY id"),
                        ("procrastinate_workers", "SELECT id, last_heartbeat, now() AS now FROM procrastinate_workers")]
        with engine.connect() as connection:
            for name, query in queries:
                if name in tables:
                    lines += [f"{name}:"] + ["  " + ", ".join(
                        value.strftime("%H:%M:%S.%f")[:-3] if hasattr(value, "strftime") else str(value)
                        for value in row) for row in connection.execute(text(query))]
    finally:
        engine.dispose()
    if log_file is not None and Path(log_file).exists():
        lines += ["log:", Path(log_file).read_bytes().decode(errors="replace")[-3000:]]
    return "\n".join(lines)


class LiveServer:
    """``calibration-service serve`` (migrations applied) in a subprocess on a free port, with a
    ``worker`` beside it when asked; their output goes to ``log_file`` when given. ``migrated``: the
    database is already at head (``calibration-service migrate`` ran first, as docker-compose orders
    it), and the server starts with ``CALIBRATION_MIGRATE_ON_START=false``, as docker-compose starts it
    (~0.5 CPU-s less a start: no Alembic import, no revision walk)."""

    def __init__(self, database_url: str, workers: int = 1, env: dict | None = None, log_file=None,
                 command_prefix: list[str] | None = None, worker: bool = False, expect_failed_jobs: bool = False,
                 migrated: bool = False):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_file = log_file
        self.database_url = database_url
        self.environment = {**os.environ, "DATABASE_URL": database_url, "CALIBRATION_PORT": str(self.port),
                            "CALIBRATION_WORKERS": str(workers), "CALIBRATION_LOG_LEVEL": "warning",
                            **DEPLOYED, **({"CALIBRATION_MIGRATE_ON_START": "false"} if migrated else {}),
                            **(env or {})}
        self.process: subprocess.Popen | None = None
        self.worker: subprocess.Popen | None = None
        self.with_worker = worker
        self.expect_failed_jobs = expect_failed_jobs
        self.command_prefix = command_prefix or []  # e.g. ["prlimit", "--as=...", "--"]

    def start(self) -> str:
        self.output = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen([*self.command_prefix, sys.executable, "-m", "app.cli", "serve"], cwd=REPO,
                                        env=self.environment,
                                        stdout=self.output, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        # the server listens only once its start-up (migrations, the application, the lifespan) is
        # done: until then a bare connect is refused, at ~15 µs of CPU, where an HTTP poll costs ~0.3 ms;
        # one client for the polls after it (each ``httpx.get`` would build a client and its SSL
        # context, a CA bundle read, ~30 ms of CPU); the worker's readiness is asked on one engine,
        # and only once the server is ready (a new engine, and a Postgres backend, a poll cost ~3 ms)
        while not self._listening():
            self._check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"server or worker not ready in 60 s: {self._said()}")
            time.sleep(0.05)
        if self.with_worker:
            # after the migrations, as docker-compose starts it (``depends_on: migrate``): a worker that
            # finds no Procrastinate tables exits (its first query, the stalled workers' prune, fails)
            self.worker = subprocess.Popen([sys.executable, "-m", "app.cli", "worker", "--concurrency", "1"], cwd=REPO,
                                           env=self.environment, stdout=self.output, stderr=subprocess.STDOUT)
        engine = database_engine(self.database_url) if self.worker is not None else None
        try:
            with httpx.Client(timeout=1) as http:
                while True:
                    self._check_alive()
                    try:
                        if http.get(f"{self.base}/readyz").status_code == 200 and self._worker_ready(engine):
                            return self.base
                    except httpx.TransportError:
                        pass
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"server or worker not ready in 60 s: {self._said()}")
                    time.sleep(0.1)
        finally:
            if engine is not None:
                engine.dispose()

    def _listening(self) -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def _check_alive(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"server exited with {self.process.returncode}: {self._said()}")
        if self.worker is not None and self.worker.poll() is not None:
            raise RuntimeError(f"worker exited with {self.worker.returncode}: {self._said()}")

    def _said(self) -> str:
        return Path(self.log_file).read_bytes().decode(errors="replace")[-2000:] if self.log_file else ""

    def _worker_ready(self, engine: Engine | None) -> bool:
        """No worker asked, or its Procrastinate worker registered (a row in ``procrastinate_workers``):
        a test's clock for a job then starts with a worker taking jobs, not with one still importing."""
        if engine is None:
            return True
        with engine.connect() as connection:
            return bool(connection.execute(text("SELECT count(*) FROM procrastinate_workers")).scalar_one())

    def stop(self, kill: bool = False) -> None:
        """Terminate (SIGTERM, a graceful shutdown) or kill (SIGKILL, a crash) the server and its
        worker; after a graceful stop, fail on jobs that ended ``failed`` unless they are expected."""
        if self.process is None:
            return
        died = self.worker is not None and self.worker.poll() is not None
        for process in (self.process, self.worker):
            if process is None:
                continue
            if kill:
                process.kill()
            else:
                process.terminate()
            try:
                process.wait(timeout=60 if process is self.worker else 20)  # a worker finishes its job
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.process = self.worker = None
        if self.log_file:
            self.output.close()
        assert not died, f"the worker exited while the server ran: {self._said()}"
        if not kill and not self.expect_failed_jobs:
            failed = failed_jobs(self.database_url)
            assert not failed, f"jobs failed in a live server's run: {failed}"


@contextmanager
def live_server(database_url: str, workers: int = 1, env: dict | None = None, log_file=None, *,
                worker: bool = False, expect_failed_jobs: bool = False, migrated: bool = False):
    """A started ``LiveServer``'s base URL, stopped on exit."""
    server = LiveServer(database_url, workers, env, log_file, worker=worker, expect_failed_jobs=expect_failed_jobs,
                        migrated=migrated)
    try:
        yield server.start()
    finally:
        server.stop()
