"""One ASGI middleware for every request: a request id, the body size limit (413 from the
Content-Length header, or while the body streams in), an access log line, Prometheus metrics, and
the count of requests in flight that ``app.http.hot_path`` reads (``HotPath.requests``). Written as
plain ASGI so it adds no buffering to the hot path."""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
import weakref

import orjson
from prometheus_client import CollectorRegistry

from .problems import Problem
from .request_metrics import RequestMetrics

log = logging.getLogger("app.access")
REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def route_label(scope) -> str:
    """The path template of the route that took the request, for metrics and the access log.
    FastAPI puts only its own routes in ``scope["route"]``; the docs pages and the OpenAPI document
    are plain Starlette routes, which leave their ``endpoint`` there instead and have no path
    parameters, so their path is their template. A request no route took is ``unmatched``."""
    route = getattr(scope.get("route"), "path", None)
    if route is None and scope.get("endpoint") is not None and not scope.get("path_params"):
        route = scope["path"]
    return route or "unmatched"


class BodyTooLarge(Problem):
    def __init__(self, limit: int):
        super().__init__(413, f"the request body exceeds the limit of {limit} bytes "
                              "(CALIBRATION_MAX_BODY_BYTES)")


class BodyTooSlow(Problem):
    def __init__(self, seconds: float):
        super().__init__(408, f"the request body did not arrive within {seconds:g} s "
                              "(CALIBRATION_BODY_SECONDS)", headers={"Connection": "close"})


def _json_problem(status: int, detail: str, request_id: str, title: str = "Content Too Large") -> bytes:
    return orjson.dumps({"type": "about:blank", "title": title, "status": status,
                         "detail": detail, "request_id": request_id})


class _Waits:
    """The receives waiting on one event loop (task -> deadline), the tasks whose deadline the check
    found passed, and whether the check is scheduled. Nothing here refers to the loop, so a loop that
    is closed and dropped leaves with its entry (``BodyDeadlines`` keys them weakly)."""

    __slots__ = ("checking", "expired", "waiting")

    def __init__(self):
        self.waiting: dict[asyncio.Task, float] = {}
        self.expired: set[asyncio.Task] = set()
        self.checking = False


class BodyDeadlines:
    """Every request body's deadline (``CALIBRATION_BODY_SECONDS`` from the request's start), kept by one
    check a loop instead of a timer a request: a ``receive`` registers its task and deadline while it
    waits; a check every ``interval`` seconds (a quarter of the limit, at most 1 s; it runs only while
    some receive waits) cancels each waiting task whose deadline has passed, and that wait ends as
    ``BodyTooSlow`` (told apart from any other cancellation by the task's cancel count, as
    ``asyncio.timeout`` does). Only waiting counts: a body the server already holds is handed over
    whenever the app reads it. So a body still arriving at its deadline is refused within ``interval``
    after it; a timer a request cost more than the rest of the middleware (docs/benchmarks.md, "The
    request middleware")."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.interval = min(1.0, seconds / 4)
        self._loops: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loop -> _Waits
        self._last: tuple[weakref.ref, _Waits] | None = None  # the loop asked last, weakly

    def _waits(self, loop) -> _Waits:
        last = self._last
        if last is not None and last[0]() is loop:
            return last[1]
        waits = self._loops.get(loop)
        if waits is None:
            waits = self._loops[loop] = _Waits()
        self._last = (weakref.ref(loop), waits)
        return waits

    async def receive(self, receive, deadline: float):
        """``await receive()``, unless it is still waiting when ``deadline`` (``time.perf_counter()``
        seconds) has passed: then ``BodyTooSlow``."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a request body is received in a task")
        loop = asyncio.get_running_loop()
        waits = self._waits(loop)
        if not waits.checking:
            waits.checking = True
            loop.call_later(self.interval, self._check, loop, waits)
        cancelling = task.cancelling()
        waits.waiting[task] = deadline
        try:
            return await receive()
        except asyncio.CancelledError:
            if task in waits.expired and task.uncancel() <= cancelling:
                raise BodyTooSlow(self.seconds) from None
            raise
        finally:
            del waits.waiting[task]
            waits.expired.discard(task)

    def _check(self, loop, waits: _Waits) -> None:
        now = time.perf_counter()
        for task, deadline in list(waits.waiting.items()):
            if deadline <= now and task not in waits.expired:
                waits.expired.add(task)
                task.cancel()
        waits.checking = bool(waits.waiting)
        if waits.checking:
            loop.call_later(self.interval, self._check, loop, waits)


class RequestMiddleware:
    def __init__(self, app, max_body_bytes: int, registry: CollectorRegistry, max_header_bytes: int = 65536,
                 body_seconds: float = 60.0, hot_path=None):
        self.app = app
        self.hot_path = hot_path  # counts the requests in flight, where given
        self.body_seconds = body_seconds
        self.deadlines = BodyDeadlines(body_seconds)
        self.max_body_bytes = max_body_bytes
        self.max_header_bytes = max_header_bytes
        self.metrics = RequestMetrics(registry)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        # httptools (uvicorn's parser here) has no limit of its own on the request head; h11's is
        # CALIBRATION_MAX_HEADER_BYTES too (app.cli). One pass over the headers: the head's size,
        # the request id and the declared length (the last of each, as a dict of them would keep)
        head = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        given_id, declared = b"", None
        for name, value in scope["headers"]:
            head += len(name) + len(value) + 4
            if name == b"x-request-id":
                given_id = value
            elif name == b"content-length":
                declared = value
        given = given_id.decode("latin-1")
        # random's generator, not os.urandom: a request id must be unique, not secret, and
        # urandom's system call releases the GIL, a hand-over to any waiting thread per request
        request_id = given if REQUEST_ID.match(given) else f"{random.getrandbits(128):032x}"
        scope.setdefault("state", {})["request_id"] = request_id
        id_header = (b"x-request-id", request_id.encode())
        status = 500
        limit = self.max_body_bytes

        async def send_with_id(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), id_header]
            await send(message)

        refusal = None
        if head > self.max_header_bytes:
            refusal = (431, f"the request head is {head} bytes, over the limit of {self.max_header_bytes} "
                            "(CALIBRATION_MAX_HEADER_BYTES)", "Request Header Fields Too Large")
        if refusal is None and declared is not None and declared.isdigit() and int(declared) > limit:
            refusal = (413, f"the request body exceeds the limit of {limit} bytes (CALIBRATION_MAX_BODY_BYTES)",
                       "Content Too Large")
        if refusal is not None:
            code, detail, title = refusal
            body = _json_problem(code, detail, request_id, title)
            await send_with_id({"type": "http.response.start", "status": code,
                                "headers": [(b"content-type", b"application/problem+json"),
                                            (b"content-length", str(len(body)).encode()),
                                            (b"connection", b"close")]})
            await send_with_id({"type": "http.response.body", "body": body})
            self._record(scope, code, start, request_id)
            return

        received = 0
        deadline = start + self.body_seconds
        deadlines = self.deadlines
        body_done = False

        async def limited_receive():
            """The body's messages, at most ``limit`` bytes in all, all of them within
            ``body_seconds`` of the request's start (a client sending its body slowly holds a
            connection and its memory: it gets 408)."""
            nonlocal received, body_done
            if body_done:
                return await receive()
            message = await deadlines.receive(receive, deadline)
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
                body_done = not message.get("more_body", False)
            return message

        hot_path = self.hot_path
        if hot_path is not None:
            hot_path.requests += 1
        try:
            await self.app(scope, limited_receive, send_with_id)
        finally:
            if hot_path is not None:
                hot_path.requests -= 1
            self._record(scope, status, start, request_id)

    def _record(self, scope, status: int, start: float, request_id: str) -> None:
        elapsed = time.perf_counter() - start
        route = route_label(scope)
        self.metrics.observe(scope["method"], route, status, elapsed)
        if log.isEnabledFor(logging.INFO):  # the line's fields are not built for a log that drops it
            log.info("request", extra={"method": scope["method"], "path": scope["path"], "route": route,
                                       "status": status, "duration_ms": round(elapsed * 1000, 3),
                                       "request_id": request_id})
