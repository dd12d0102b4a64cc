"""Isolation (#17): heavy requests (fits, reports, comparisons, metrics) have their own bounded
threads and queue, so readiness and listings never wait behind them and an overflow is a 503 with
Retry-After; SIGTERM during a long fit stops the process within the shutdown bound."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import socket
import time

import httpx
import pytest

from tests.helpers import load_split
from tests.service.support.databases import copy_sqlite_database
from tests.service.support.live import LiveServer, live_server

# one client for this module's plain calls, keeping no connection between them (a fresh connection
# each, as ``httpx.get`` and co make): those build a client and its SSL context (a CA bundle read, ~35 ms
# of CPU) every call
HTTP = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))

KIND, X, Y = load_split("cifar100_wrn16-4", "val")
CANDIDATES = ["temperature", "ensemble_temperature", "expectation_consistency", "isotonic_multiclass",
              "isotonic_one_vs_all", "irova_ts"]
# an 8-fold auto fit of six candidates on 5000 x 100 logits: seconds of computing (several times the
# 1.5 s the tests wait before they look), long enough that it is still running when they do
SLOW_FIT = {"method": "auto", "options": {"folds": 8, "candidates": CANDIDATES}, KIND: X.tolist(),
            "labels": Y.tolist()}
IN_REQUEST = {"CALIBRATION_SYNC_BUDGET_SECONDS": "1e9"}  # slow fits stay in their requests here


@pytest.mark.slow
def test_heavy_requests_past_the_work_queue_get_503_while_readiness_answers(migrated_sqlite_url):
    env = {**IN_REQUEST, "CALIBRATION_WORK_THREADS": "1", "CALIBRATION_WORK_QUEUE": "1"}
    body = json.dumps(SLOW_FIT).encode()  # encoded once, before the clock: 500000 floats take seconds under load
    headers = {"Content-Type": "application/json"}
    with live_server(migrated_sqlite_url, migrated=True, env=env) as base, \
            concurrent.futures.ThreadPoolExecutor(3) as pool:
        fits = [pool.submit(httpx.post, f"{base}/v1/calibrators/slow-{i}/versions", content=body, headers=headers,
                            timeout=120) for i in range(2)]
        time.sleep(1.5)  # both admitted: one computing, one waiting
        refused = HTTP.post(f"{base}/v1/metrics", json={"probabilities": [[0.8, 0.2]], "labels": [0]})
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "5", refused.text
        assert "CALIBRATION_WORK_THREADS" in refused.json()["detail"]
        waits = []
        with httpx.Client(base_url=base, timeout=5) as http:
            while not all(fit.done() for fit in fits):
                start = time.monotonic()
                assert http.get("/readyz").status_code == 200
                assert http.get("/v1/calibrators").status_code == 200
                waits.append(time.monotonic() - start)
                time.sleep(0.2)
        assert [fit.result().status_code for fit in fits] == [201, 201]
        assert waits and max(waits) < 1.0, waits
        assert HTTP.post(f"{base}/v1/metrics", json={"probabilities": [[0.8, 0.2]], "labels": [0]}).status_code == 200


@pytest.mark.slow
def test_sigterm_during_a_long_fit_stops_the_process_within_the_shutdown_bound(migrated_sqlite_url, tmp_path):
    server = LiveServer(migrated_sqlite_url, migrated=True, env={**IN_REQUEST, "CALIBRATION_SHUTDOWN_SECONDS": "1"},
                        log_file=tmp_path / "server.log")
    base = server.start()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fit = pool.submit(httpx.post, f"{base}/v1/calibrators/slow/versions", json=SLOW_FIT, timeout=120)
        time.sleep(1.5)
        assert not fit.done()
        start = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=30)
        stopped = time.monotonic() - start
        with pytest.raises(httpx.HTTPError):
            fit.result().raise_for_status()
    server.process = None
    server.output.close()
    assert stopped < 5, f"took {stopped:.1f} s to stop"


# the three tests of the connection limits below share one server: each sets a limit the others do
# not reach (a head of 200 KB sent at once, a body of which the head arrives, heads never finished)
CONNECTION_LIMITS = {"CALIBRATION_MAX_HEADER_BYTES": "16384", "CALIBRATION_BODY_SECONDS": "1",
                     "CALIBRATION_HEADER_SECONDS": "2"}


@pytest.fixture(scope="module")
def limited(sqlite_head, tmp_path_factory):
    """A server with ``CONNECTION_LIMITS``, on a copy of the migrated database."""
    folder = tmp_path_factory.mktemp("limits")
    server = LiveServer(copy_sqlite_database(sqlite_head, folder / "calibration.db"), migrated=True,
                        env=CONNECTION_LIMITS, log_file=folder / "server.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_an_oversized_request_head_is_refused_and_the_server_serves_on(limited):
    base = limited.base
    with socket.create_connection(("127.0.0.1", limited.port), timeout=10) as connection:
        connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n")
        answer = b""
        try:
            while chunk := connection.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    assert b"CALIBRATION_MAX_HEADER_BYTES" in answer
    assert HTTP.get(f"{base}/healthz").status_code == 200


def test_bodies_sent_too_slowly_get_408_and_free_their_connections(limited):
    base = limited.base
    head = (b"POST /v1/metrics HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n{\"probabilities\": ")
    connections = [socket.create_connection(("127.0.0.1", limited.port), timeout=10) for _ in range(200)]
    start = time.monotonic()
    try:
        for connection in connections:
            connection.sendall(head)  # and never the rest
        answers = [connection.recv(200) for connection in connections]
    finally:
        for connection in connections:
            connection.close()
    assert time.monotonic() - start < 8
    assert all(answer.startswith(b"HTTP/1.1 408") for answer in answers), {a[:40] for a in answers}
    served = HTTP.post(f"{base}/v1/metrics", json={"probabilities": [[0.8, 0.2]], "labels": [0]})
    assert served.status_code == 200


@pytest.mark.slow
def test_half_sent_heads_are_closed_and_the_server_serves_again(limited):
    """1100 connections (more than CALIBRATION_MAX_CONNECTIONS) that each send half a request head:
    while they are held every good request gets 503; after CALIBRATION_HEADER_SECONDS they are
    closed, their file descriptors come back and good requests are served. A kept-alive connection
    that trickles its next head is closed the same way."""
    server, base = limited, limited.base
    descriptors = len(os.listdir(f"/proc/{server.process.pid}/fd"))
    connections = []
    for _ in range(1100):
        connection = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        connection.sendall(b"POST /v1/metrics HTTP/1.1\r\nHost: test\r\n")  # never the end of the head
        connections.append(connection)
    assert HTTP.get(f"{base}/healthz", timeout=5).status_code == 503  # every slot held
    deadline = time.monotonic() + 10
    while HTTP.get(f"{base}/healthz", timeout=5).status_code != 200:
        assert time.monotonic() < deadline, "half-sent heads still hold the server"
        time.sleep(0.2)
    assert time.monotonic() - deadline + 10 >= 1.0  # not before the head deadline
    assert all(connection.recv(100) == b"" for connection in connections)  # closed by the server
    assert len(os.listdir(f"/proc/{server.process.pid}/fd")) <= descriptors + 5
    for connection in connections:
        connection.close()

    kept = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
    answer = b""
    while b"}" not in answer:  # the head and the JSON body, in however many reads
        answer += kept.recv(1000)
    assert answer.startswith(b"HTTP/1.1 200")
    kept.sendall(b"GET /healthz HTTP/1.1\r\n")  # the next head, never finished
    started = time.monotonic()
    assert kept.recv(100) == b""
    assert 1.5 < time.monotonic() - started < 6
    kept.close()
