"""Errors as RFC 9457 problem details (``application/problem+json``) on /v1 and elsewhere,
and as ``{"error": "..."}`` on /v2, as the Open Inference Protocol specifies.

The one place errors become responses: the service's domain errors (``app.platform.errors``, each with
its status and title), ``Problem`` for what only HTTP knows (keys, body size, the database
being away), FastAPI's validation errors and Starlette's HTTP exceptions."""

from __future__ import annotations

import logging
from http import HTTPStatus

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, ProgrammingError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from ..platform.errors import Conflict, ServiceError
from ..platform.logs import first_line

log = logging.getLogger("app.errors")
PROBLEM_TYPE = "about:blank"


class Problem(Exception):
    """An error the client can act on: status, a short title and a precise detail."""

    def __init__(self, status: int, detail: str, title: str | None = None,
                 headers: dict[str, str] | None = None, **extra):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.title = title or HTTPStatus(status).phrase
        self.headers = headers or {}
        self.extra = extra


def from_error(error: ServiceError) -> Problem:
    """The problem a domain error becomes (with ``Retry-After`` where it says when to retry)."""
    retry_after = getattr(error, "retry_after", None)
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return Problem(error.status, error.detail, title=error.title, headers=headers, **error.extra)


def unavailable(detail: str = "the database is unreachable; retry shortly") -> Problem:
    return Problem(503, detail, headers={"Retry-After": "5"})


def unmigrated() -> Problem:
    return unavailable("the database schema is missing or behind: run `calibration-service migrate`")


def _missing_schema(exc: DBAPIError) -> bool:
    message = str(exc.orig).lower()
    return "no such table" in message or ("relation" in message and "does not exist" in message)


def render(request: Request, problem: Problem) -> Response:
    headers = dict(problem.headers)
    if request.url.path.startswith("/v2"):
        # the protocol's errors: {"error": ...}; invalid input is a 400 there
        status = 400 if problem.status == 422 else problem.status
        body = orjson.dumps({"error": problem.detail})
        return Response(body, status_code=status, media_type="application/json", headers=headers)
    payload = {"type": PROBLEM_TYPE, "title": problem.title, "status": problem.status,
               "detail": problem.detail, "instance": request.url.path, **problem.extra}
    request_id = request.headers.get("x-request-id") or getattr(request.state, "request_id", None)
    if request_id:
        payload["request_id"] = request_id
    return Response(orjson.dumps(payload), status_code=problem.status,
                    media_type="application/problem+json", headers=headers)


def _validation_detail(exc: RequestValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ()))
        parts.append(f"{where}: {error.get('msg')}")
    return "; ".join(parts) or "invalid request"


def install(app: FastAPI) -> None:
    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem):
        return render(request, exc)

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError):
        return render(request, from_error(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        return render(request, Problem(422, _validation_detail(exc), title="Invalid input"))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no such endpoint: {request.method} {request.url.path}"
        return render(request, Problem(exc.status_code, detail, headers=getattr(exc, "headers", None)))

    @app.exception_handler(OperationalError)
    async def _database_down(request: Request, exc: OperationalError):
        if _missing_schema(exc):
            return render(request, unmigrated())
        log.warning("database unavailable: %s", first_line(exc))
        return render(request, unavailable())

    @app.exception_handler(ProgrammingError)
    async def _database_programming(request: Request, exc: ProgrammingError):
        if _missing_schema(exc):
            return render(request, unmigrated())
        log.exception("database error")
        return render(request, Problem(500, "internal database error"))

    @app.exception_handler(IntegrityError)
    async def _integrity(request: Request, exc: IntegrityError):
        log.info("integrity conflict: %s", first_line(exc.orig) if exc.orig else exc)
        return render(request, from_error(Conflict("the request conflicts with a concurrent change; retry it")))

    @app.exception_handler(DBAPIError)
    async def _database_error(request: Request, exc: DBAPIError):
        if exc.connection_invalidated:
            return render(request, unavailable())
        log.exception("database error")
        return render(request, Problem(500, "internal database error"))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("unhandled error")
        return render(request, Problem(500, "internal error; the request id identifies it in the logs"))
