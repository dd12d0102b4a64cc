"""Domain errors: what the service, the store and the decoders raise when a request cannot be
served. They know nothing of HTTP frameworks; each carries the status and title of the RFC 9457
problem it becomes (``routes.problems`` renders them, on ``/v2`` as ``{"error": ...}``) and that a
failed job records."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Literal


class ServiceError(Exception):
    """An error the client can act on, with a precise ``detail``."""

    status: ClassVar[int] = 500
    title: ClassVar[str] = "Internal Server Error"

    def __init__(self, detail: str, **extra):
        super().__init__(detail)
        self.detail = detail
        self.extra = extra

    def as_problem(self) -> dict:
        """The status, title and detail (a failed job's ``error``)."""
        return {"status": self.status, "title": self.title, "detail": self.detail}


class MalformedRequest(ServiceError):
    """The body cannot be read at all (empty, not JSON, not an object)."""

    status, title = 400, "Bad Request"


class NotFound(ServiceError):
    status, title = 404, "Not Found"


class NotAcceptable(ServiceError):
    status, title = 406, "Not Acceptable"


class Conflict(ServiceError):
    status, title = 409, "Conflict"


class TooLarge(ServiceError):
    status, title = 413, "Content Too Large"


class UnsupportedMediaType(ServiceError):
    status, title = 415, "Unsupported Media Type"


class InvalidInput(ServiceError):
    """Readable but wrong: a field, an array or an option the core refuses."""

    status, title = 422, "Invalid input"


class Unavailable(ServiceError):
    """Not now: a queue is full or a dependency is away; ``retry_after`` seconds is a hint."""

    status, title = 503, "Service Unavailable"

    def __init__(self, detail: str, retry_after: int = 5, **extra):
        super().__init__(detail, **extra)
        self.retry_after = retry_after


class IntegrityFailure(ServiceError):
    """A stored calibrator does not match its checksum or cannot be loaded: never served."""

    status, title = 500, "Stored calibrator failed its integrity check"



class refused_as:
    """Turn a ``ValueError`` raised in the ``with`` block (how the numeric core refuses an input) into
    ``error`` with the core's message as its detail (or ``detail``, when the message is not for the
    client), chained to the ``ValueError``. Any other exception passes through unchanged. A class, not a
    generator, so that entering it on the serving path costs no generator."""

    __slots__ = ("detail", "error")

    def __init__(self, error: Callable[[str], Exception] = InvalidInput, detail: str | None = None):
        self.error = error
        self.detail = detail

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: object) -> Literal[False]:
        if kind is not None and issubclass(kind, ValueError):
            raise self.error(str(exc) if self.detail is None else self.detail) from exc
        return False
