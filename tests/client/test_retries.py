"""Retries against real failures: a live server whose database has no schema answers 503 with
``Retry-After: 5`` (tests/service/live/test_faults.py), and a port nobody listens on refuses
connections. The client waits what the server asks, reuses one Idempotency-Key across the
retries of a POST, and reaches the server once it has recovered."""

from __future__ import annotations

import asyncio
import email.utils
import os
import subprocess
import sys
import time
import uuid

import httpx
import pytest

from calibration_client import AsyncClient, Client, ConnectionFailed, NotFound, Unavailable
from calibration_client._transport import RetryPolicy, parse_retry_after
from tests.helpers import REPO
from tests.service.support.live import LiveServer, free_port

MISSING = "the database schema is missing or behind: run `calibration-service migrate`"
BATCH = [[2.0, 0.5, -1.0], [0.3, 1.8, -0.2]]


class UnmigratedServer(LiveServer):
    """A server started without migrating: alive (``/healthz``) but never ready."""

    def __init__(self, database_url: str):
        super().__init__(database_url, env={"CALIBRATION_MIGRATE_ON_START": "false"})

    def start(self) -> str:
        self.process = subprocess.Popen([sys.executable, "-m", "app.cli", "serve"], cwd=REPO, env=self.environment,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"server exited with {self.process.returncode}"
            try:
                if httpx.get(f"{self.base}/healthz", timeout=1).status_code == 200:
                    return self.base
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not answer /healthz in 60 s")


def _unmigrated(tmp_path):
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    server = UnmigratedServer(url)
    return url, server, server.start()


@pytest.fixture(scope="module")
def unmigrated(tmp_path_factory):
    _, server, base = _unmigrated(tmp_path_factory.mktemp("unmigrated"))
    yield base
    server.stop()


def test_a_503_is_retried_after_its_retry_after_with_one_idempotency_key(unmigrated, monkeypatch):
    sent: list[httpx.Request] = []
    with Client(unmigrated, retries=2, event_hooks={"request": [sent.append]}) as client:
        waited: list[float] = []
        monkeypatch.setattr(client, "_sleep", waited.append)
        with pytest.raises(Unavailable) as unavailable:
            client.calibrate("demo", BATCH)
        assert waited == [5.0, 5.0]  # the server's Retry-After, not the client's own backoff
        assert len(sent) == 3
        keys = {request.headers["idempotency-key"] for request in sent}
        assert len(keys) == 1 and uuid.UUID(next(iter(keys))).version == 4
        problem = unavailable.value
        assert (problem.status, problem.detail, problem.headers["retry-after"]) == (503, MISSING, "5")

        # the next logical POST gets a key of its own; a GET gets none
        sent.clear()
        waited.clear()
        with pytest.raises(Unavailable):
            client.calibrate("demo", BATCH)
        with pytest.raises(Unavailable):
            client.calibrators()
        second = {r.headers["idempotency-key"] for r in sent[:3]}
        assert len(second) == 1 and second != keys
        assert all("idempotency-key" not in r.headers for r in sent[3:]) and len(sent) == 6


def test_a_retry_after_longer_than_the_client_will_wait_is_not_waited(unmigrated, monkeypatch):
    sent: list[httpx.Request] = []
    with Client(unmigrated, retries=3, max_retry_after=1, event_hooks={"request": [sent.append]}) as client:
        waited: list[float] = []
        monkeypatch.setattr(client, "_sleep", waited.append)
        with pytest.raises(Unavailable):
            client.calibrators()
    assert waited == [] and len(sent) == 1


def test_connection_errors_back_off_exponentially_then_raise(monkeypatch):
    port = free_port()  # nothing listens there
    with Client(f"http://127.0.0.1:{port}", retries=3, backoff=0.5) as client:
        waited: list[float] = []
        monkeypatch.setattr(client, "_sleep", waited.append)
        with pytest.raises(ConnectionFailed) as failed:
            client.calibrators()
    assert len(waited) == 3 and all(0 <= w <= 0.5 * 2**i for i, w in enumerate(waited))
    assert failed.value.status is None and f"127.0.0.1:{port}" in failed.value.detail


def test_retry_after_as_an_http_date():
    assert parse_retry_after("7") == 7.0
    assert 1.0 <= parse_retry_after(email.utils.formatdate(time.time() + 3, usegmt=True)) <= 3.0
    assert parse_retry_after(email.utils.formatdate(time.time() - 60, usegmt=True)) == 0.0
    assert parse_retry_after("not a date") is None
    assert RetryPolicy(retries=1).delay(0, "3") == 3.0 and RetryPolicy(retries=1).delay(1, "3") is None


def test_the_async_client_really_waits_and_reaches_the_recovered_server(tmp_path):
    """The first answer is a 503; while the client waits its 5 s the operator migrates; the retry
    reaches a working server (which has no calibrator 'demo': 404)."""
    url, server, base = _unmigrated(tmp_path)
    migrating: list[subprocess.Popen] = []

    async def on_response(response: httpx.Response) -> None:
        if response.status_code == 503 and not migrating:
            migrating.append(subprocess.Popen([sys.executable, "-m", "app.cli", "migrate"], cwd=REPO,
                                              env={**os.environ, "DATABASE_URL": url}))

    async def calibrate() -> float:
        async with AsyncClient(base, retries=1, event_hooks={"response": [on_response]}) as client:
            started = time.monotonic()
            with pytest.raises(NotFound) as missing:
                await client.calibrate("demo", BATCH)
            assert missing.value.detail == "no calibrator named 'demo'"
            return time.monotonic() - started

    try:
        elapsed = asyncio.run(calibrate())
        assert migrating and migrating[0].wait(timeout=60) == 0
    finally:
        server.stop()
    assert 5.0 <= elapsed < 20.0  # the 5 s asked for, plus two requests on a busy machine
