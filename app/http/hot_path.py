"""Where the hot path's blocking work runs: calibrate and ``/v2`` inference run either on the
event loop itself, when their estimated cost is tiny, or on a pool of ``CALIBRATION_SERVE_THREADS``
threads of their own (``settings.serve_threads``: 2 where each worker has two cores, else 1);
everything else (fits, reports, listings) uses anyio's default pool of 40, so a long fit never
queues them. The measurements behind each rule are in docs/benchmarks.md ("Where the hot path's
work runs").

**On the loop when tiny**, because handing a call to a thread and back (two wake-ups, a context
switch, the GIL passing back and forth) costs more than a small batch's work. Each kind of call
(function, path, media type) learns its cost per body byte from its last ``WINDOW`` runs (their
CPU time, the smallest: a run that waited for the GIL or a core measures long, never short; a run
that waited ``STALL`` times longer than it worked and than the budget counts its wall time), and a
call whose estimate (that cost × its body's bytes) is within ``CALIBRATION_INLINE_SECONDS`` (0 turns
this off) runs on the loop, on SQLite only: on Postgres the version lookup is a network round trip
that can wait for a pooled connection, which must never happen on the loop. A kind's first call
always goes to the pool. Calls on the loop run one after another, so when one of them turns out
over the budget its kind forgets its other runs: at most one such call stalls the loop before its
kind goes back to the pool, and ``/readyz`` and ``/healthz`` wait for at most a few tiny calls.

**JSON calls hold the GIL** (parse, list conversion, dump and freeing are C that holds it), so on a
thread they keep the loop waiting nearly as long as on the loop itself, and pay a round of GIL
passing at every hand-over. Their budget is therefore ``JSON_BUDGET`` times
``CALIBRATION_INLINE_SECONDS`` (off with it, and off on Postgres).

**A call that overran.** The estimate is learned, so a client can teach a low cost per byte and then
send a dense body that takes far longer than the budget on the loop. Such a call still runs to its
end; its kind (a Content-Type's parameters do not make new kinds) forgets its runs, as after any
overrun, and when two of its calls within ``COOLDOWN`` seconds worked ``OVERRUN`` times the budget
or more, the kind stays off the loop for the next ``COOLDOWN`` seconds: at most two long stalls a
minute for each calibrator and body type. Not at the first (a lone hiccup happens), nor for waiting:
a client's body cannot make the service wait, only work.

**The pool** is small because these calls are short and numpy-bound: with many threads they pass the
GIL back and forth at every numpy call. Two threads let one thread's numpy work (which releases the
GIL) overlap the other's Python where a worker has two cores. A plain executor hands work over with
less overhead than anyio's ``to_thread`` (no capacity limiter or context copy).
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
