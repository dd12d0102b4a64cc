"""Calibrate and /v2 inference run on their own bounded threads (CALIBRATION_SERVE_THREADS);
other work keeps anyio's default pool."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest
from starlette.testclient import TestClient

from app.main import create_app
from app.platform.migrate import upgrade
from app.settings import Settings
from tests.service.support.fits import LOGITS, fit


class ConcurrencyProbe:
    """Wraps a real service method: counts the calls inside it at once (each held 50 ms)."""

    def __init__(self, method):
        self.method, self.active, self.most, self.lock = method, 0, 0, threading.Lock()

    def __call__(self, *args, **kwargs):
        with self.lock:
            self.active += 1
            self.most = max(self.most, self.active)
        try:
            time.sleep(0.05)
            return self.method(*args, **kwargs)
        finally:
            with self.lock:
                self.active -= 1


@pytest.mark.parametrize("threads", [1, 3])
def test_hot_path_runs_at_most_serve_threads_calls_at_once(sqlite_url, threads):
    upgrade(sqlite_url)
    app = create_app(Settings(database_url=sqlite_url, serve_threads=threads))
    fit(TestClient(app))  # outside the context manager: no lifespan, so nothing is shut down
    service = app.state.service
    # calibrate and /v2 infer both resolve the version first, on the thread they run on
    probe = service.serving = ConcurrencyProbe(service.serving)
    batch = LOGITS[:8]
    v1 = {"logits": batch.tolist()}
    v2 = {"inputs": [{"name": "logits", "shape": list(batch.shape), "datatype": "FP64",
                      "data": batch.ravel().tolist()}]}

    async def burst():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            calls = [asyncio.create_task(client.post("/v1/calibrators/demo/calibrate", json=v1)) for _ in range(4)]
            calls += [asyncio.create_task(client.post("/v2/models/demo/infer", json=v2)) for _ in range(4)]
            while probe.active == 0 and not any(call.done() for call in calls):
                await asyncio.sleep(0.001)
            # a listing uses the default pool: it is answered while the burst still queues
            listing = await client.get("/v1/calibrators")
            pending = sum(not call.done() for call in calls)
            return [await call for call in calls], listing, pending

    responses, listing, pending = asyncio.run(burst())
    assert [r.status_code for r in responses] == [200] * 8, [r.text for r in responses]
    assert listing.status_code == 200 and pending > 0
    assert probe.most == threads


def test_serve_threads_must_be_positive():
    with pytest.raises(ValueError, match="serve_threads"):
        Settings(serve_threads=0)


def test_calibrate_is_matched_first_but_docs_list_the_routes_as_written():
    from app.registry.routes import DOCS_ORDER, router

    assert [route.path.endswith("/calibrate") for route in router.routes[:2]] == [True, True]
    schema = create_app(Settings(database_url="sqlite://")).openapi()
    written = list(dict.fromkeys(DOCS_ORDER))
    assert [path for path in schema["paths"] if path in written] == written
    assert written[0] == "/v1/calibrators/{name}/versions"  # fit, then the rest, as in the module


def test_serve_threads_default_to_two_only_where_each_worker_has_two_cores():
    from app.settings import serve_threads

    assert [serve_threads(Settings(workers=w), cores=2) for w in (1, 2, 3)] == [2, 1, 1]
    assert serve_threads(Settings(workers=4), cores=16) == 2
    assert serve_threads(Settings(workers=1, serve_threads=5), cores=2) == 5


def test_a_kind_of_call_runs_on_the_loop_only_once_its_runs_show_it_tiny():
    from app.http.hot_path import HotPath

    hot = HotPath(1, inline_seconds=0.001)
    kind = ("calibrate", "/v1/calibrators/demo/calibrate", "application/x-npy")
    assert not hot.runs_inline(kind, 1000)  # never seen: the pool
    for seconds in (0.0008, 0.0002, 0.0005):  # the smallest per byte counts (the others waited)
        hot.learn(kind, 1000, seconds, inline=False)
    assert hot.estimate(kind, 1000) == pytest.approx(0.0002)
    assert hot.runs_inline(kind, 1000) and hot.runs_inline(kind, 5000)
    assert not hot.runs_inline(kind, 6000)  # 1.2 ms expected: a larger batch goes to the pool
    assert not hot.runs_inline(kind, None)  # no body to estimate from
    # a call on the loop over the budget (a heavier calibrator behind the same name): the pool at once
    hot.learn(kind, 1000, 0.004, inline=True)
    assert not hot.runs_inline(kind, 1000) and hot.estimate(kind, 1000) == pytest.approx(0.004)
    assert not HotPath(1, inline_seconds=0).runs_inline(kind, 1)



def test_a_kind_straddling_the_budget_keeps_its_path_and_takes_the_loop_only_alone():
    """A 512 x 1000 float32 /v2 call costs about the 2 ms budget: it keeps one path instead of
    changing at every other call, on the loop when its request is alone, on a thread beside others."""
    from app.http.hot_path import WINDOW, HotPath

    hot = HotPath(1, inline_seconds=0.002)
    kind = ("infer", "/v2/models/bench/infer", "application/octet-stream")
    for seconds in (0.0026, 0.0019, 0.0024):  # on a thread
        hot.learn(kind, 1000, seconds, inline=False)
    hot.requests = 1  # this call's own request only
    assert hot.runs_inline(kind, 1000)  # 1.9 ms expected
    # on the loop a little over the budget as often as under: each run is remembered, the runs on the
    # loop decide, and the kind stays there while they are within 1.5 budgets (3 ms)
    for seconds in (0.0022, 0.0029, 0.0024, 0.0021):
        hot.learn(kind, 1000, seconds, inline=True, cpu=seconds)
        assert hot.runs_inline(kind, 1000)
    assert hot.estimate(kind, 1000) == pytest.approx(0.0021)
    hot.learn(kind, 1000, 0.0016, inline=True, cpu=0.0016)
    assert len(hot.costs[kind]) == 8 and hot.estimate(kind, 1000) == pytest.approx(0.0016)
    hot.learn(kind, 1000, 0.0012, inline=False)  # a thread's run does not speak for the loop
    assert hot.estimate(kind, 1000) == pytest.approx(0.0016)
    # beside other requests a call expected over half the budget goes to a thread, a smaller one not
    hot.requests = 3
    assert not hot.runs_inline(kind, 650) and hot.runs_inline(kind, 600)
    # not a JSON call, which holds the GIL on a thread too: within its budget, on the loop
    json_kind = (*kind[:2], "application/json")
    hot.learn(json_kind, 1000, 0.006, inline=False)
    assert hot.runs_inline(json_kind, 1000)  # 6 ms of its 10
    # its runs on the loop all over 1.5 budgets: a thread, for as long as they are remembered
    hot.requests = 1
    for _ in range(WINDOW):
        hot.learn(kind, 1000, 0.0031, inline=True, cpu=0.0031)
    assert not hot.runs_inline(kind, 1000)
    for _ in range(WINDOW - 1):
        hot.learn(kind, 1000, 0.0019, inline=False)
    assert not hot.runs_inline(kind, 1000)
    hot.learn(kind, 1000, 0.0019, inline=False)
    assert hot.runs_inline(kind, 1000)
    # a run on the loop over twice the budget (a heavier calibrator behind the name) forgets the others
    hot.learn(kind, 1000, 0.0001, inline=True, cpu=0.0001)
    hot.learn(kind, 1000, 0.0041, inline=True, cpu=0.0041)
    assert list(hot.costs[kind]) == [(pytest.approx(4.1e-6), True)] and not hot.runs_inline(kind, 1000)


def test_the_requests_in_flight_are_counted_for_the_hot_path(sqlite_url):
    upgrade(sqlite_url)
    # every call on a thread, so that the burst's requests are all in flight at once
    app = create_app(Settings(database_url=sqlite_url, serve_threads=2, inline_seconds=0))
    fit(TestClient(app))
    hot, service = app.state.hot_path, app.state.service
    seen, serving, burst = [], service.serving, [1]

    def recorded(reference):
        # a call waits (on its thread, up to 10 s) for the rest of its burst to arrive: the count it
        # sees is then the burst's, however slowly a loaded machine lets the other calls in
        deadline = time.monotonic() + 10
        while hot.requests < burst[0] and time.monotonic() < deadline:
            time.sleep(0.002)
        seen.append(hot.requests)
        return serving(reference)

    service.serving = recorded
    batch = LOGITS[:8]
    v1 = {"logits": batch.tolist()}

    async def calls(count: int):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await asyncio.gather(*(client.post("/v1/calibrators/demo/calibrate", json=v1)
                                          for _ in range(count)))

    assert [r.status_code for r in asyncio.run(calls(1))] == [200]
    assert seen == [1] and hot.requests == 0
    seen.clear()
    burst[0] = 4
    assert [r.status_code for r in asyncio.run(calls(4))] == [200] * 4
    assert len(seen) == 4 and seen[0] == 4 and hot.requests == 0


def test_json_calls_get_five_times_the_inline_budget_and_an_overrun_bars_its_kind_for_a_while(monkeypatch):
    from app.http import hot_path
    from app.http.hot_path import HotPath

    now = [1000.0]
    monkeypatch.setattr(hot_path.time, "monotonic", lambda: now[0])
    hot = HotPath(1, inline_seconds=0.002)
    json_kind = ("calibrate", "/v1/calibrators/demo/calibrate", "application/json")
    npy_kind = ("calibrate", "/v1/calibrators/demo/calibrate", "application/x-npy")
    for kind in (json_kind, npy_kind):
        hot.learn(kind, 1000, 0.004, inline=False)  # a 64 x 1000 JSON call's ~4 ms
    assert hot.runs_inline(json_kind, 1000) and hot.runs_inline(json_kind, 2500)  # 10 ms
    assert not hot.runs_inline(json_kind, 2600)
    assert not hot.runs_inline(npy_kind, 1000)  # 2 ms
    hot.learn(json_kind, 1000, 0.006, inline=True)  # within its budget: remembered, not a reset
    assert len(hot.costs[json_kind]) == 2
    # over the budget, waiting or working a little more: the kind forgets its other runs, no more
    hot.learn(json_kind, 1000, 0.03, inline=True, cpu=0.012)
    assert len(hot.costs[json_kind]) == 1 and not hot.runs_inline(json_kind, 1000)
    # back on the loop once that run on the loop is forgotten, WINDOW runs later
    for _ in range(hot_path.WINDOW - 1):
        hot.learn(json_kind, 1000, 1e-6, inline=False)
    assert not hot.runs_inline(json_kind, 1000)
    hot.learn(json_kind, 1000, 1e-6, inline=False)
    assert hot.runs_inline(json_kind, 1000)
    # a lone call that worked 4 budgets (a hiccup) resets the kind; a second within COOLDOWN (a
    # client that taught a low cost with padded bodies, then sent dense ones) bars it for COOLDOWN
    hot.learn(json_kind, 1000, 0.041, inline=True, cpu=0.041)
    for _ in range(hot_path.WINDOW):
        hot.learn(json_kind, 1000, 1e-6, inline=False)
    assert hot.runs_inline(json_kind, 1000)
    now[0] += hot_path.COOLDOWN - 1
    hot.learn(json_kind, 1000, 0.041, inline=True, cpu=0.041)
    for _ in range(hot_path.WINDOW):
        hot.learn(json_kind, 1000, 1e-6, inline=False)
    assert not hot.runs_inline(json_kind, 1000)
    now[0] += hot_path.COOLDOWN
    assert hot.runs_inline(json_kind, 1000)
    # the operator's setting bounds both budgets
    assert HotPath(1, inline_seconds=0.0005).budget(json_kind) == pytest.approx(0.0025)
    off = HotPath(1, inline_seconds=0)
    off.learn(json_kind, 1000, 1e-6, inline=False)
    assert not off.runs_inline(json_kind, 1000)


def record_serving_threads(app) -> list[str]:
    """The name of the thread each calibrate call looks its version up on, in order."""
    threads, service = [], app.state.service
    serving = service.serving

    def recorded(reference):
        threads.append(threading.current_thread().name)
        return serving(reference)

    service.serving = recorded
    return threads


def test_tiny_calibrate_calls_run_on_the_event_loop_and_costly_ones_on_the_serve_threads(sqlite_url):
    upgrade(sqlite_url)
    app = create_app(Settings(database_url=sqlite_url, serve_threads=1, inline_seconds=0.05))
    with TestClient(app) as client:
        fit(client)
        threads = record_serving_threads(app)
        small = {"logits": LOGITS[:2].tolist()}
        answers = [client.post("/v1/calibrators/demo/calibrate", json=small) for _ in range(3)]
        assert [a.status_code for a in answers] == [200] * 3
        assert answers[2].json() == answers[0].json()
        assert answers[2].headers["x-calibrator-version"] == "1"
        # the first call of its kind on a serve thread, the next ones (far under 50 ms) on the loop
        assert threads[0].startswith("hot-path") and not any(t.startswith("hot-path") for t in threads[1:])
        # runs of the kind that cost 10 ms per body byte: the next call is expected to take far
        # more than a JSON call's 250 ms (5 x 50 ms), and goes back to a serve thread
        hot = app.state.hot_path
        (_kind, runs), = hot.costs.items()
        runs.clear()
        runs.append((1e-2, True))
        assert client.post("/v1/calibrators/demo/calibrate", json=small).status_code == 200
        assert threads[-1].startswith("hot-path")


def test_a_call_learns_its_cpu_time_unless_it_waited_far_longer_than_it_worked():
    from app.http.hot_path import HotPath

    hot = HotPath(1, inline_seconds=0.001)
    waits, works = ("waits",), ("works",)
    assert hot.timed(waits, 1000, True, time.sleep, 0.05) is None  # 50 ms of waiting on the loop
    assert hot.estimate(waits, 1000) >= 0.05 and not hot.runs_inline(waits, 1000)
    hot.timed(works, 1000, False, sum, range(1000))
    assert hot.estimate(works, 1000) < 0.001 and hot.runs_inline(works, 1000)


@pytest.mark.postgres
def test_on_postgres_calibrate_never_runs_on_the_event_loop(migrated_postgres_url):
    """The version lookup is a network round trip there, which may wait for a pooled connection."""
    app = create_app(Settings(database_url=migrated_postgres_url, serve_threads=1, inline_seconds=0.05))
    with TestClient(app) as client:
        fit(client)
        threads = record_serving_threads(app)
        small = {"logits": LOGITS[:2].tolist()}
        for _ in range(4):
            assert client.post("/v1/calibrators/demo/calibrate", json=small).status_code == 200
        assert len(threads) == 4 and all(t.startswith("hot-path") for t in threads)
