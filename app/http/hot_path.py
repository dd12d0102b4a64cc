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
always goes to the pool. The cost is that of its runs on the loop where it has some among those
it remembers, else that of its runs on the threads, which measure more CPU time for the same call
(docs/benchmarks.md, "Where the hot path's work runs").

**One path, not one at every other call.** A kind goes onto the loop when its estimate is within
the budget and stays there while it is within ``STAY`` times the budget: a kind whose cost straddles
the budget (a 512 x 1000 float32 call, ~2 ms) keeps one path instead of trying the loop, paying
over the budget and going back at every few calls. Calls on the loop run one after another, so when
one of them takes over ``RESET`` times the budget its kind forgets its other runs: at most one such
call stalls the loop before its kind goes back to the pool; ``/readyz`` and ``/healthz`` wait for at
most a few small calls.

**On the loop only alone, when not tiny.** A call expected to take over ``SHARED`` of the budget runs
on the loop only when its request is the only one in flight (``requests``, which
``app.http.middleware`` counts): the loop has nothing else to do meanwhile, and the hand-over is
pure cost. Beside other requests, the loop receives their bodies and sends their answers while a
thread computes, which for such a call is worth more than the hand-over. Not for JSON calls, which
hold the GIL on a thread too (below), so that nothing overlaps.

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
DEFAULT_INLINE_SECONDS = 0.003
STALL = 10  # a call whose wall time is this many times its CPU time (and the budget) waited on something
JSON_BUDGET = 5  # JSON calls' budget, in CALIBRATION_INLINE_SECONDS (module docstring)
OVERRUN = 4  # two calls on the loop whose CPU time is this many times the budget...
COOLDOWN = 60.0  # ...within this many seconds bar their kind for as long
RESET = 2  # a call on the loop that took this many times the budget makes its kind forget its runs
STAY = 1.5  # a kind on the loop stays there while its estimate is within this many times the budget
SHARED = 0.5  # a call expected to take over this share of the budget runs on the loop only alone


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
        self.costs: dict[tuple, deque] = {}  # kind -> (seconds per body byte, on the loop) of its last runs
        self.barred: dict[tuple, float] = {}  # kind -> until when (monotonic) it stays off the loop
        self.overran: dict[tuple, float] = {}  # kind -> when (monotonic) a call of it last overran far
        self.requests = 0  # HTTP requests in flight (app.http.middleware counts them)

    def budget(self, kind: tuple) -> float:
        """How long a call of ``kind`` (function, path, media type) may take on the loop."""
        return self.json_seconds if kind[-1] == JSON_TYPE else self.inline_seconds

    def learned(self, kind: tuple) -> tuple[float, bool] | None:
        """A call of ``kind``'s cost per body byte on the loop, if known, and whether runs on the
        loop tell it: its smallest remembered run on the loop, or with none, on a thread."""
        runs = self.costs.get(kind)
        if not runs:
            return None
        on_loop = [cost for cost, inline in runs if inline]
        return min(on_loop or [cost for cost, _ in runs]), bool(on_loop)

    def estimate(self, kind: tuple, size: int) -> float | None:
        """Seconds a call of ``kind`` with a ``size``-byte body is expected to take on the loop, if known."""
        learned = self.learned(kind)
        return learned[0] * max(size, 1) if learned else None

    def runs_inline(self, kind: tuple, size: int | None) -> bool:
        budget = self.budget(kind)
        learned = self.learned(kind)
        if budget <= 0 or size is None or learned is None:
            return False
        cost, on_loop = learned
        estimate = cost * max(size, 1)
        if estimate > (STAY * budget if on_loop else budget):
            return False
        if estimate > SHARED * budget and self.requests > 1 and kind[-1] != JSON_TYPE:
            return False
        barred = self.barred.get(kind)
        return barred is None or time.monotonic() >= barred

    def learn(self, kind: tuple, size: int, seconds: float, inline: bool, cpu: float = 0.0) -> None:
        """Remember a run of ``seconds`` (``cpu`` of them working); a run on the loop over ``RESET``
        times the budget resets the kind's runs, and the second within ``COOLDOWN`` whose work took
        ``OVERRUN`` times the budget (an estimate far too low: not a wait, which a client's body
        cannot cause) bars the kind."""
        runs = self.costs.get(kind)
        budget = self.budget(kind)
        if runs is None or (inline and seconds > RESET * budget):
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
        runs.append((seconds / max(size, 1), inline))

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
