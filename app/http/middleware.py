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

import orjson
from prometheus_client import CollectorRegistry, Counter, Histogram

from .problems import Problem

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


async def _within(receive, seconds: float, limit: float):
    """``await receive()``, cancelled after ``seconds`` (then ``BodyTooSlow(limit)``). What
    ``asyncio.timeout`` does (a timer that cancels the task, told apart from any other
    cancellation by the task's cancel count), without its context object and state machine: one
    timer handle, ~2.5 us a message against ~5.5 (two messages for a 64 x 1000 float32 body)."""
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("a request body is received in a task")
    cancelling = task.cancelling()
    expired = False

    def expire():
        nonlocal expired
        expired = True
        task.cancel()

    timer = asyncio.get_running_loop().call_later(max(0.0, seconds), expire)
    try:
        return await receive()
    except asyncio.CancelledError:
        if expired and task.uncancel() <= cancelling:
            raise BodyTooSlow(limit) from None
        raise
    finally:
        timer.cancel()


class RequestMiddleware:
    def __init__(self, app, max_body_bytes: int, registry: CollectorRegistry, max_header_bytes: int = 65536,
                 body_seconds: float = 60.0, hot_path=None):
        self.app = app
        self.hot_path = hot_path  # counts the requests in flight, where given
        self.body_seconds = body_seconds
        self.max_body_bytes = max_body_bytes
        self.max_header_bytes = max_header_bytes
        self.requests = Counter("calibration_requests_total", "HTTP requests",
                                ["method", "route", "status"], registry=registry)
        self.latency = Histogram("calibration_request_seconds", "HTTP request latency",
                                 ["method", "route"], registry=registry,
                                 buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10))
        self._series: dict = {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        headers = dict(scope["headers"])
        given_id = headers.get(b"x-request-id", b"").decode("latin-1")
        # random's generator, not os.urandom: a request id must be unique, not secret, and
        # urandom's system call releases the GIL, a hand-over to any waiting thread per request
        request_id = given_id if REQUEST_ID.match(given_id) else f"{random.getrandbits(128):032x}"
        scope.setdefault("state", {})["request_id"] = request_id
        status_holder = {"status": 500}
        limit = self.max_body_bytes

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                status_holder["status"] = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)

        # httptools (uvicorn's parser here) has no limit of its own on the request head; h11's is
        # CALIBRATION_MAX_HEADER_BYTES too (app.cli)
        head = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        head += sum(len(name) + len(value) + 4 for name, value in scope["headers"])
        refusal = None
        if head > self.max_header_bytes:
            refusal = (431, f"the request head is {head} bytes, over the limit of {self.max_header_bytes} "
                            "(CALIBRATION_MAX_HEADER_BYTES)", "Request Header Fields Too Large")
        declared = headers.get(b"content-length")
        if refusal is None and declared is not None and declared.isdigit() and int(declared) > limit:
            refusal = (413, f"the request body exceeds the limit of {limit} bytes (CALIBRATION_MAX_BODY_BYTES)",
                       "Content Too Large")
        if refusal is not None:
            status, detail, title = refusal
            body = _json_problem(status, detail, request_id, title)
            await send_with_id({"type": "http.response.start", "status": status,
                                "headers": [(b"content-type", b"application/problem+json"),
                                            (b"content-length", str(len(body)).encode()),
                                            (b"connection", b"close")]})
            await send_with_id({"type": "http.response.body", "body": body})
            self._record(scope, status, start, request_id)
            return

        received = 0
        body_deadline = start + self.body_seconds
        body_done = False

        async def limited_receive():
            """The body's messages, at most ``limit`` bytes in all, all of them within
            ``body_seconds`` of the request's start (a client sending its body slowly holds a
            connection and its memory: it gets 408)."""
            nonlocal received, body_done
            if body_done:
                return await receive()
            message = await _within(receive, body_deadline - time.perf_counter(), self.body_seconds)
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
            self._record(scope, status_holder["status"], start, request_id)

    def _record(self, scope, status: int, start: float, request_id: str) -> None:
        elapsed = time.perf_counter() - start
        route = route_label(scope)
        key = (scope["method"], route, status)
        series = self._series.get(key)
        if series is None:  # labels() validates and locks: look each series up once
            series = self._series[key] = (self.requests.labels(key[0], route, str(status)),
                                          self.latency.labels(key[0], route))
        series[0].inc()
        series[1].observe(elapsed)
        if log.isEnabledFor(logging.INFO):  # the line's fields are not built for a log that drops it
            log.info("request", extra={"method": scope["method"], "path": scope["path"], "route": route,
                                       "status": status, "duration_ms": round(elapsed * 1000, 3),
                                       "request_id": request_id})
