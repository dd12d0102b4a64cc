"""Where the hot path's blocking work runs: calibrate and ``/v2`` inference have a pool of
``CALIBRATION_SERVE_THREADS`` threads of their own (``settings.serve_threads``: 2 where each
worker has two cores, else 1); everything else (fits, reports, listings) uses anyio's default
pool of 40, so a long fit never queues them.

These calls are short and numpy-bound. With many threads they pass the GIL back and forth at
every numpy call: on anyio's pool of 40, with 32 concurrent 64×1000 calibrate calls, one
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
from concurrent.futures import ThreadPoolExecutor

from fastapi import FastAPI, Request


def install(app: FastAPI, threads: int) -> ThreadPoolExecutor:
    app.state.hot_path = ThreadPoolExecutor(threads, thread_name_prefix="hot-path")
    return app.state.hot_path


async def run(request: Request, fn, *args):
    """``fn(*args)`` on one of the hot path's threads."""
    return await asyncio.get_running_loop().run_in_executor(request.app.state.hot_path, fn, *args)
