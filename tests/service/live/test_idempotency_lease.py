"""An ``Idempotency-Key`` claim lives as long as the process that answers it: a claim left by a
process killed with SIGKILL lapses after ``CALIBRATION_IDEMPOTENCY_LEASE_SECONDS``, and the retry
then runs (once); a claim whose request is still running is renewed and keeps answering 409."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest
from sqlalchemy import select, text
from starlette.testclient import TestClient

from app.access.rows import IdempotencyRow
from app.main import create_app
from app.platform.db import Database
from app.settings import Settings
from tests.helpers import REPO
from tests.service.support.live import LiveServer

NAME = "crashy"
ROWS = 50
KEY = "append-0001"
SCOPE = f"POST /v1/calibrators/{NAME}/observations"


def _body(seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    return json.dumps({"logits": rng.normal(size=(ROWS, 3)).round(6).tolist(),
                       "labels": rng.integers(0, 3, ROWS).tolist()}).encode()


def _append(client, body: bytes, key: str = KEY) -> httpx.Response:
    return client.post(f"/v1/calibrators/{NAME}/observations", content=body,
                       headers={"content-type": "application/json", "idempotency-key": key})


def _retry_until_answered(client, body: bytes, seconds: float = 30.0) -> tuple[httpx.Response, int]:
    """The retry's answer once it is no longer 409, and how many 409s came before."""
    conflicts, limit = 0, time.monotonic() + seconds
    while True:
        response = _append(client, body)
        if response.status_code != 409:
            return response, conflicts
        conflicts += 1
        assert time.monotonic() < limit, f"still 409 after {seconds} s: {response.text}"
        time.sleep(0.2)


def test_a_claim_of_a_process_killed_with_sigkill_is_taken_over_after_its_lease(database_url, tmp_path):
    body = _body()
    # a real process claims the key as a request would (with the server's lease of 1 s), and is
    # killed before it answers
    script = ("import os, signal, sys\n"
              "from app.platform.db import Database\n"
              "from app.access.idempotency import IdempotencyKeys, request_digest\n"
              "keys = IdempotencyKeys(Database(sys.argv[1]), 86400, lease_seconds=1)\n"
              f"digest = request_digest('application/json', '', open(sys.argv[2], 'rb').read())\n"
              f"assert keys.claim({SCOPE!r}, {KEY!r}, digest) is None\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    path = tmp_path / "body.json"
    path.write_bytes(body)
    done = subprocess.run([sys.executable, "-c", script, database_url, str(path)], cwd=REPO, timeout=60)
    assert done.returncode == -9
    app = create_app(Settings(database_url=database_url, job_engine="embedded", idempotency_lease_seconds=1))
    with TestClient(app) as client:
        response, _ = _retry_until_answered(client, body)
        assert response.status_code == 201, response.text
        assert response.json()["appended"] == ROWS and response.json()["total_rows"] == ROWS
        replay = _append(client, body)  # the retry's answer is kept: a third try replays it
        assert replay.status_code == 201 and replay.headers["idempotent-replayed"] == "true"
        assert replay.json() == response.json()
        assert client.get(f"/v1/calibrators/{NAME}/observations").json()["total_rows"] == ROWS


@pytest.mark.postgres
def test_a_claim_whose_request_still_runs_is_renewed_past_its_lease(migrated_postgres_url):
    """A request held (by a row lock) for several leases keeps its claim: retries get 409 all along,
    and the appended rows count once."""
    app = create_app(Settings(database_url=migrated_postgres_url, job_engine="embedded", idempotency_lease_seconds=1))
    locker = Database(migrated_postgres_url)
    with TestClient(app) as client:
        assert _append(client, _body(1), key="first").status_code == 201  # the calibrator exists
        held = threading.Event()
        release = threading.Event()

        def hold_the_calibrator():
            with locker.write() as session:
                session.execute(text("SELECT id FROM calibrators WHERE name = :n FOR UPDATE"), {"n": NAME})
                held.set()
                release.wait(60)

        holder = threading.Thread(target=hold_the_calibrator)
        holder.start()
        assert held.wait(30)
        first = {}
        sender = threading.Thread(target=lambda: first.setdefault("answer", _append(client, _body())))
        sender.start()
        try:
            _wait_for_claim(locker)
            started = time.monotonic()
            conflicts = 0
            while time.monotonic() - started < 3.5:  # 3.5 leases: the claim is renewed meanwhile
                retry = _append(client, _body())
                assert retry.status_code == 409, retry.text
                conflicts += 1
                time.sleep(0.3)
        finally:
            release.set()
            holder.join()
            sender.join()
        assert conflicts >= 3 and first["answer"].status_code == 201
        assert client.get(f"/v1/calibrators/{NAME}/observations").json()["total_rows"] == 2 * ROWS
    locker.dispose()


def _wait_for_claim(db: Database) -> None:
    limit = time.monotonic() + 30
    while True:
        with db.read() as session:
            row = session.scalar(select(IdempotencyRow).where(IdempotencyRow.key == KEY))
        if row is not None:
            assert row.status_code is None
            return
        assert time.monotonic() < limit, "the request never claimed its key"
        time.sleep(0.05)


@pytest.mark.postgres
def test_a_server_killed_mid_append_leaves_a_claim_that_a_retry_takes_over(migrated_postgres_url, tmp_path):
    """SIGKILL while an append sent with an Idempotency-Key waits for the calibrator's row lock
    (the key claimed, nothing appended): after the lease, the retry to a restarted server appends."""
    server = LiveServer(migrated_postgres_url, env={"CALIBRATION_IDEMPOTENCY_LEASE_SECONDS": "1",
                                                    "CALIBRATION_SCHEDULE_SECONDS": "0"},
                        log_file=tmp_path / "server.log")
    base = server.start()
    locker = Database(migrated_postgres_url)
    try:
        with httpx.Client(base_url=base, timeout=60) as client:
            assert _append(client, _body(1), key="first").status_code == 201  # the calibrator exists
        with locker.write() as session:
            session.execute(text("SELECT id FROM calibrators WHERE name = :n FOR UPDATE"), {"n": NAME})
            sending = threading.Thread(target=lambda: _swallow(lambda: _append(httpx.Client(base_url=base,
                                                                                            timeout=60), _body())))
            sending.start()
            _wait_for_claim(locker)
            server.stop(kill=True)
            sending.join()
        with locker.read() as session:  # the killed request's claim is left, unanswered
            assert session.scalar(select(IdempotencyRow.status_code).where(IdempotencyRow.key == KEY)) is None
        base = server.start()
        with httpx.Client(base_url=base, timeout=60) as client:
            response, _ = _retry_until_answered(client, _body())
            assert response.status_code == 201, response.text
            assert response.json()["appended"] == ROWS and response.json()["total_rows"] == 2 * ROWS
    finally:
        server.stop()
        locker.dispose()


def _swallow(call) -> None:
    with contextlib.suppress(httpx.TransportError):  # the server was killed under it
        call()
