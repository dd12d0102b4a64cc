"""Typed exceptions for the service's problems (RFC 9457 ``application/problem+json``).

Every error the client raises is a ``CalibrationError``; an HTTP error carries the problem's
fields (``type``, ``title``, ``status``, ``detail``, ``instance``, ``request_id``), so a caller
can print ``detail`` or quote ``request_id`` to whoever runs the service.
"""

from __future__ import annotations

from typing import Any


class CalibrationError(Exception):
    """A problem answered by the service, or a request that could not be made.

    ``status`` is the HTTP status (``None`` when no answer came back); ``detail`` the
    service's precise message; ``request_id`` the id the service logged the request under.
    """

    def __init__(self, detail: str, *, status: int | None = None, title: str | None = None,
                 type: str = "about:blank", instance: str | None = None, request_id: str | None = None,
                 headers: dict[str, str] | None = None, body: Any = None):
        super().__init__(detail)
        self.detail = detail
        self.status = status
        self.title = title
        self.type = type
        self.instance = instance
        self.request_id = request_id
        self.headers = dict(headers or {})
        self.body = body

    def __str__(self) -> str:
        head = " ".join(str(part) for part in (self.status, self.title) if part)
        return f"{head}: {self.detail}" if head else self.detail

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status!r}, detail={self.detail!r})"


class InvalidInput(CalibrationError):
    """400 or 422: the request was understood and refused (bad arrays, options, names)."""


class Unauthorized(CalibrationError):
    """401: no API key, or an unknown or revoked one."""


class Forbidden(CalibrationError):
    """403: the API key lacks the scope (read < write < admin)."""


class NotFound(CalibrationError):
    """404: no such calibrator, version, alias or job."""


class Conflict(CalibrationError):
    """409: the request conflicts with the stored state (e.g. deleting an aliased version)."""


class PayloadTooLarge(CalibrationError):
    """413: the body is over the service's limit (``CALIBRATION_MAX_BODY_BYTES``)."""


class ServerError(CalibrationError):
    """5xx: the service failed."""


class Unavailable(ServerError):
    """503: the service cannot answer now (database unreachable, schema missing); retried with
    the ``Retry-After`` it sends before this is raised."""


class ConnectionFailed(CalibrationError):
    """No answer: the service could not be reached, or the connection broke or timed out (after
    the retries)."""


class JobFailed(CalibrationError):
    """A background job ended ``failed`` or ``cancelled``; ``job`` is its last state and
    ``status``/``detail`` come from the job's problem document."""

    def __init__(self, job, **fields):
        error = job.error or {}
        default = "the job was cancelled" if job.status == "cancelled" else "the job failed"
        super().__init__(error.get("detail") or default, status=error.get("status"),
                         title=error.get("title"), **fields)
        self.job = job


_BY_STATUS: dict[int, type[CalibrationError]] = {
    400: InvalidInput,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidInput,
    503: Unavailable,
}


def error_class(status: int) -> type[CalibrationError]:
    """The exception class of an HTTP error status."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return ServerError if status >= 500 else CalibrationError
