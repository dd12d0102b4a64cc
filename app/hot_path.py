"""Where the hot path's blocking work runs: calibrate and ``/v2`` inference take at most
``CALIBRATION_SERVE_THREADS`` threads of their own (default 1); everything else (fits,
reports, listings) uses anyio's default pool of 40, so a long fit never queues them.

These calls are short and numpy-bound. With more threads than the process can use, the
threads pass the GIL back and forth at every numpy call: with 40 threads and 32 concurrent
64×1000 calibrate calls, a worker made ~60 context switches per request and spent 2.66 ms of
CPU on each; with one thread, ~12 and 1.99 ms (``perf stat``, see benchmarks/README.md).
"""

from __future__ import annotations

import anyio.to_thread
from anyio import CapacityLimiter
from fastapi import FastAPI, Request


def install(app: FastAPI, threads: int) -> None:
    app.state.hot_path_limiter = CapacityLimiter(threads)


async def run(request: Request, fn, *args):
    """``fn(*args)`` on one of the hot path's threads."""
    return await anyio.to_thread.run_sync(fn, *args, limiter=request.app.state.hot_path_limiter)
