"""Admission control for heavy requests: fits, reports, comparisons and metrics run on a pool of
``CALIBRATION_WORK_THREADS`` threads of their own, with at most ``CALIBRATION_WORK_QUEUE`` more
waiting for one; beyond that a request is refused at once with 503 and ``Retry-After`` instead of
queueing without bound. Health, readiness, listings and reads use anyio's pool and calibrate has
its own threads (``hot_path``), so none of them waits behind heavy work: 45 slow fits in flight
used to make ``/readyz`` time out while ``/healthz`` answered.

The threads are daemon threads of this module's own: the standard library's executors join their
threads when the interpreter exits, so one long fit kept a SIGTERMed process alive until it ended
(25 s and more). Here uvicorn's graceful shutdown (``CALIBRATION_SHUTDOWN_SECONDS``) is the bound:
after it the process exits, and a fit still computing is dropped with its request (a job is the
job engine's to recover)."""

from __future__ import annotations

import asyncio
import queue
import threading

from fastapi import FastAPI, Request

from .problems import Problem

RETRY_AFTER_SECONDS = 5


class WorkPool:
    def __init__(self, threads: int, waiting: int):
        self.capacity = threads + waiting
        self.admitted = 0
        self.lock = threading.Lock()
        self.tasks: queue.SimpleQueue = queue.SimpleQueue()
        for index in range(threads):
            threading.Thread(target=self._work, name=f"work-{index}", daemon=True).start()

    def _work(self) -> None:
        while (task := self.tasks.get()) is not None:
            _run(*task)
            del task  # it holds the request's arrays: not kept alive until this thread's next task

    async def run(self, fn, *args):
        """``fn(*args)`` on a work thread, or a 503 when the pool and its queue are full."""
        with self.lock:
            if self.admitted >= self.capacity:
                raise Problem(503, f"{self.admitted} heavy requests (fits, reports, comparisons) are in flight or "
                                   "waiting in this process (CALIBRATION_WORK_THREADS + CALIBRATION_WORK_QUEUE); "
                                   "retry shortly", headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
            self.admitted += 1
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.tasks.put((loop, future, fn, args))
        try:
            return await future
        finally:
            with self.lock:
                self.admitted -= 1

    def shutdown(self) -> None:
        """Let each thread end after its current task."""
        for _ in range(self.capacity):
            self.tasks.put(None)


def _run(loop, future, fn, args) -> None:
    """``fn(*args)``, its result or exception handed to the request's event loop; nothing of the
    call outlives it on this thread."""
    try:
        result = fn(*args)
    except BaseException as exc:  # handed to the request that asked for the work
        loop.call_soon_threadsafe(_settle, future, None, exc)
    else:
        loop.call_soon_threadsafe(_settle, future, result, None)


def _settle(future: asyncio.Future, result, error: BaseException | None) -> None:
    if future.done():  # the request was cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def install(app: FastAPI, threads: int, waiting: int) -> WorkPool:
    app.state.work = WorkPool(threads, waiting)
    return app.state.work


async def run(request: Request, fn, *args):
    return await request.app.state.work.run(fn, *args)
