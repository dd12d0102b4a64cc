"""Where the hot path's blocking work runs: calibrate and ``/v2`` inference run either on the
event loop itself, when their estimated cost is tiny, or on a pool of ``CALIBRATION_SERVE_THREADS``
threads of their own (``settings.serve_threads``: 2 where each worker has two cores, else 1);
everything else (fits, reports, listings) uses anyio's default pool of 40, so a long fit never
queues them.

**On the loop when tiny.** Handing a call to a thread and back costs more than a small batch's
work: for a 64×1000 float32 ``.npy`` calibrate, 660 µs of CPU a request through the pool against
450 µs on the loop (in-process, one request at a time), the handover being two wake-ups, a
context switch and the GIL passing back and forth. So each kind of call (function, path,
media type) learns its cost per body byte from its last ``WINDOW`` runs (their CPU time, the
smallest: a run that waited for the GIL or a core measures long, never short; a run that waited
``STALL`` times longer than it worked and than the budget, on a slow database say, counts its
wall time), and a call whose estimate (that cost × its body's bytes) is within
``CALIBRATION_INLINE_SECONDS`` (default 2 ms: a 64×1000 ``.npy`` call took 0.33-0.56 ms of CPU
in-process, and the budget leaves room for a loaded machine; 0 turns this off) runs on the loop,
on SQLite only: there the version lookup is a local read; on Postgres it is a network round trip
that can wait for a pooled connection, which must never happen on the loop. A kind's first call
always goes to the pool. Calls on the loop run one after another, so when one of them turns out
over the budget (a heavier calibrator behind the same name, a slow database) its kind forgets
its other runs (and, far over, stays on the pool for a while: below): at most one such call
stalls the loop before its kind goes back to the pool. Large batches and heavy calibrators never
run there, so ``/readyz`` and ``/healthz`` wait for at most a few tiny calls.

**JSON calls hold the GIL.** A JSON body's call spends nearly all its time in C that holds the GIL:
for a 64×1000 calibrate (~3.9 ms), orjson's parse 1.5 ms, numpy's conversion of the nested lists
1.0 ms, orjson's dump 1.0 ms and freeing the lists 0.25 ms. On a thread it keeps the loop waiting
nearly as long as on the loop itself (in stretches of up to 1.5 ms), and the hand-over costs a
round of GIL passing every time the loop wakes for another connection's body: 5.9 and 6.2 ms of
CPU a request at 8 and 32 connections on the threads, 5.3 and 5.6 ms on the loop, and 5-6% fewer
requests a second at 1 connection (benchmarks/service_latency.py, a busy machine; the tail at 32
connections grows as the floor's does, p99 0.36 -> 0.8 s, each call holding the loop). Their
budget is therefore ``JSON_BUDGET`` (5) times ``CALIBRATION_INLINE_SECONDS``: 10 ms at the default
2 ms (0 turns both off, and they are off on Postgres). Not 5 ms: a 64×1000 JSON call's CPU time is
~4 ms alone but 5-6 ms while the client sends the next bodies on the other core of this 2-core
machine, and with a 5 ms budget a third to half of the calls at 8 and 32 connections flipped back
to the threads (per-thread CPU from /proc: 139 against 183 requests a second at 8 connections).

**A call that overran.** The estimate is learned, so a client can teach a low cost per byte
(bodies padded with whitespace, or many small calls) and then send a dense body that takes far
longer than the budget on the loop. Such a call still runs to its end; its kind (function, path,
media type: a Content-Type's parameters do not make new kinds) forgets its runs, as after any
overrun, and when two of its calls within ``COOLDOWN`` seconds (60) worked ``OVERRUN`` (4) times the
budget or more, the kind stays off the loop for the next 60 s: at most two stalls longer than four
budgets a minute for each calibrator and body type. Not at the first: a lone hiccup happens (a
64×100 ``.npy`` call of ~0.4 ms once took 22 ms of CPU among ~30000 in benchmarks/prediction_log.py,
and 76 ms in another run), and barring the kind for it halved that benchmark's throughput. Nor for
waiting (a call that waited for the GIL while the log's writer ran, say): a client's body cannot
make the service wait, only work. How long one stall can be is bounded by what the body limits
let through; a JSON body's parse and conversion hold the GIL on a thread too, so there the loop
would wait for most of it anyway.

**The pool.** These calls are short and numpy-bound. With many threads they pass the GIL back and
forth at every numpy call: on anyio's pool of 40, with 32 concurrent 64×1000 calibrate calls, one
worker process made ~60 context switches per request and spent 2.66 ms of CPU on each. With
one thread, ~11 and 1.5 ms; with two, ~19 and 1.56 ms but 12-18% more requests per second, as
one thread's numpy work (which releases the GIL) overlaps the other's Python (``perf stat`` and
benchmarks/service_latency.py, 1 worker, 2 cores). With 2 workers on those 2 cores there is no
idle core to overlap with, and one thread each does better (84% of the floor against 80%).
A plain executor hands work over in ~35 µs less than anyio's ``to_thread`` (no capacity
limiter or context copy).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from fastapi import FastAPI, Request

from ..wire.decoding import JSON_TYPE, RequestBody, media_type

WINDOW = 8  # runs a kind of call remembers
MAX_KINDS = 4096  # kinds remembered (paths name calibrators): forgotten all at once beyond it
DEFAULT_INLINE_SECONDS = 0.002
STALL = 10  # a call whose wall time is this many times its CPU time (and the budget) waited on something
JSON_BUDGET = 5  # JSON calls' budget, in CALIBRATION_INLINE_SECONDS (module docstring)
OVERRUN = 4  # two calls on the loop whose CPU time is this many times the budget...
COOLDOWN = 60.0  # ...within this many seconds bar their kind for as long


def body_bytes(args) -> int | None:
    """The size of the request body among a call's arguments (``RequestBody`` or bytes)."""
    for arg in args:
        if isinstance(arg, RequestBody):
            return len(arg.content)
        if isinstance(arg, bytes | bytearray):
            return len(arg)
    return None


class HotPath:
    """The pool, and what each kind of call costs per body byte."""

    def __init__(self, threads: int, inline_seconds: float = DEFAULT_INLINE_SECONDS):
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="hot-path")
        self.inline_seconds = inline_seconds
        self.json_seconds = JSON_BUDGET * inline_seconds  # JSON calls hold the GIL on a thread too
        self.costs: dict[tuple, deque] = {}  # kind -> seconds per body byte of its last runs
        self.barred: dict[tuple, float] = {}  # kind -> until when (monotonic) it stays off the loop
        self.overran: dict[tuple, float] = {}  # kind -> when (monotonic) a call of it last overran far

    def budget(self, kind: tuple) -> float:
        """How long a call of ``kind`` (function, path, media type) may take on the loop."""
        return self.json_seconds if kind[-1] == JSON_TYPE else self.inline_seconds

    def estimate(self, kind: tuple, size: int) -> float | None:
        """Seconds a call of ``kind`` with a ``size``-byte body is expected to take, if known."""
        runs = self.costs.get(kind)
        return min(runs) * max(size, 1) if runs else None

    def runs_inline(self, kind: tuple, size: int | None) -> bool:
        budget = self.budget(kind)
        if budget <= 0 or size is None:
            return False
        estimate = self.estimate(kind, size)
        if estimate is None or estimate > budget:
            return False
        barred = self.barred.get(kind)
        return barred is None or time.monotonic() >= barred

    def learn(self, kind: tuple, size: int, seconds: float, inline: bool, cpu: float = 0.0) -> None:
        """Remember a run of ``seconds`` (``cpu`` of them working); a run on the loop over the
        budget resets the kind's runs, and the second within ``COOLDOWN`` whose work took
        ``OVERRUN`` times the budget (an estimate far too low: not a wait, which a client's body
        cannot cause) bars the kind."""
        runs = self.costs.get(kind)
        budget = self.budget(kind)
        if runs is None or (inline and seconds > budget):
            if len(self.costs) >= MAX_KINDS:
                self.costs.clear()
                self.barred.clear()
                self.overran.clear()
            runs = self.costs[kind] = deque(maxlen=WINDOW)
        if inline and cpu > OVERRUN * budget:
            now = time.monotonic()
            if now - self.overran.get(kind, -math.inf) < COOLDOWN:  # the second within COOLDOWN
                self.barred[kind] = now + COOLDOWN
            self.overran[kind] = now
        runs.append(seconds / max(size, 1))

    def timed(self, kind: tuple, size: int | None, inline: bool, fn, *args):
        start, cpu = time.perf_counter(), time.thread_time()
        result = fn(*args)
        if size is not None:
            wall, cpu = time.perf_counter() - start, time.thread_time() - cpu
            # the call's CPU time: on a busy machine its wall time also counts the time other
            # processes held the core; unless it waited far longer than it worked (a slow database)
            self.learn(kind, size, wall if wall > STALL * max(self.budget(kind), cpu) else cpu, inline, cpu)
        return result

    async def run(self, kind: tuple, fn, *args):
        size = body_bytes(args)
        if self.runs_inline(kind, size):
            return self.timed(kind, size, True, fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self.pool, self.timed, kind, size, False, fn, *args)


def install(app: FastAPI, threads: int) -> ThreadPoolExecutor:
    settings = getattr(app.state, "settings", None)
    inline = getattr(settings, "inline_seconds", DEFAULT_INLINE_SECONDS)
    db = getattr(app.state, "db", None)
    if db is not None and db.dialect != "sqlite":
        # the version lookup is a network round trip that may wait for a pooled connection (up to
        # the pool's timeout, behind fits): never on the loop, where it would stall every request
        inline = 0.0
    app.state.hot_path = HotPath(threads, inline)
    return app.state.hot_path.pool


async def run(request: Request, fn, *args):
    """``fn(*args)``: on the event loop when its estimated cost is tiny, else on one of the hot
    path's threads."""
    kind = (fn, request.scope["path"], media_type(request.headers.get("content-type")))
    return await request.app.state.hot_path.run(kind, fn, *args)
