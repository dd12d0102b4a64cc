"""The instructions an operation yields and what the runners do with them, once for the sync and
the async client: ``Call`` (send this request, give me the response), ``Sleep`` (wait) and
``Report`` (tell the caller's progress callback); ``request`` (the request every try of a call
sends, built once: one ``Idempotency-Key`` per POST, reused on its retries), ``RetryPolicy`` (which
answers are retried, and after how long: ``Retry-After`` or exponential backoff with full
jitter), ``settings`` (a client's base URL, headers and retry policy), ``read_owned`` (an
answer's body read once into memory of its own, for an array to take), ``problem`` (an error
answer as its typed exception) and ``PlainHTTPTransport`` (a service at an ``http://`` address
without the cost of TLS set-up)."""

from __future__ import annotations

import email.utils
import functools
import json
import os
import random
import ssl
import time
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import httpx

from ._defaults import DEFAULT_URL
from .errors import CalibrationError, error_class

RETRY_STATUSES = frozenset({429, 503})
JSON = "application/json"


@dataclass
class Call:
    """One HTTP request. ``ok`` are the statuses that are answers, not problems."""

    method: str
    path: str
    params: dict[str, str] | None = None
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    ok: tuple[int, ...] = (200,)
    #: an answer's body is read into memory of its own (``read_owned``) and the runner replies
    #: ``(response, body)``: an array decoded from it takes that memory, with no second copy
    owned_body: bool = False


@dataclass
class Sleep:
    seconds: float


@dataclass
class Report:
    callback: Callable[[float], Any]
    percent: float


Operation = Generator[Call | Sleep | Report, Any, Any]


# -- retries -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """``retries`` more tries after the first on 429, 503 and transport errors; the wait is the
    answer's ``Retry-After`` when it gives one (a retry that would wait longer than
    ``max_retry_after`` is not made), else exponential backoff with full jitter:
    uniform(0, min(max_backoff, backoff * 2**attempt))."""

    retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 30.0
    max_retry_after: float = 120.0

    def delay(self, attempt: int, retry_after: str | None) -> float | None:
        """Seconds to wait before try ``attempt + 1`` (0-based ``attempt`` just failed), or
        ``None``: do not retry."""
        if attempt >= self.retries:
            return None
        if retry_after:
            seconds = parse_retry_after(retry_after)
            if seconds is not None:
                return seconds if seconds <= self.max_retry_after else None
        return random.uniform(0, min(self.max_backoff, self.backoff * 2**attempt))


def settings(url: str | None, api_key: str | None, retries: int, backoff: float, max_backoff: float,
             max_retry_after: float, headers: dict | None) -> tuple[str, dict, RetryPolicy]:
    """A client's base URL (``$CALIBRATION_URL`` or the default, no trailing ``/``), the headers
    it sends with every call (its ``User-Agent``, the caller's, the API key from the argument or
    ``$CALIBRATION_API_KEY``) and its retry policy."""
    url = (url or os.environ.get("CALIBRATION_URL") or DEFAULT_URL).rstrip("/")
    api_key = api_key or os.environ.get("CALIBRATION_API_KEY")
    sent = {"User-Agent": "calibration-client", **(headers or {})}
    if api_key:
        sent["X-API-Key"] = api_key
    return url, sent, RetryPolicy(retries, backoff, max_backoff, max_retry_after)


def parse_retry_after(value: str) -> float | None:
    """``Retry-After`` in seconds: delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def request(http: httpx.Client | httpx.AsyncClient, base: str, call: Call) -> httpx.Request:
    """The request every try of ``call`` sends: to ``absolute_url`` (what httpx makes of the client's
    ``base_url``, the path and ``params``, parsed once), with the client's headers and ``call``'s; a
    POST gets one ``Idempotency-Key``, reused on its retries."""
    headers = dict(call.headers)
    if call.method == "POST":
        headers.setdefault("Idempotency-Key", str(uuid.uuid4()))
    content = call.content
    if content is None and call.json is not None:
        content = json.dumps(call.json, allow_nan=False).encode()
        headers.setdefault("Content-Type", JSON)
    query = str(httpx.QueryParams(call.params)) if call.params else ""
    return http.build_request(call.method, absolute_url(base, call.path, query), headers=headers, content=content)


@functools.lru_cache(maxsize=256)
def absolute_url(base: str, path: str, query: str) -> httpx.URL:
    """``base`` (no trailing ``/``) + ``path`` (from ``/``) + ``?query`` (where not empty) as one
    parsed URL, the one httpx merges from ``base_url``, a path and ``params``."""
    return httpx.URL(f"{base}{path}?{query}" if query else f"{base}{path}")


def _owned_buffer(response: httpx.Response):
    """A writable buffer of the answer's ``Content-Length`` (numpy's ``empty``: its pages are not
    zeroed first), or None where the body must go through httpx's decoding (a ``Content-Encoding``)
    or its length is not given."""
    length = response.headers.get("content-length", "")
    if not length.isdigit() or "content-encoding" in response.headers:
        return None
    import numpy as np

    return memoryview(np.empty(int(length), dtype=np.uint8))


def _fill(buffer, at: int, chunk: bytes) -> int:
    if at + len(chunk) > len(buffer):
        raise httpx.RemoteProtocolError(f"the answer is longer than its Content-Length of {len(buffer)} bytes")
    buffer[at:at + len(chunk)] = chunk
    return at + len(chunk)


def _filled(buffer, at: int):
    """``buffer`` once its ``at`` bytes are all of it (h11 ends a body at its length: a short one is
    a transport error before this)."""
    if at != len(buffer):
        raise httpx.RemoteProtocolError(f"the answer ended after {at} of its {len(buffer)} bytes")
    return buffer


def read_owned(response: httpx.Response):
    """The body of a streamed ``response`` in a writable buffer nobody else holds: its raw chunks
    copied once into a buffer of its ``Content-Length`` (httpx's own read joins them into a bytes
    object, which an array must copy again to be writable), or, with a ``Content-Encoding`` or no
    length, httpx's decoded body copied. The response is closed."""
    try:
        buffer = _owned_buffer(response)
        if buffer is None:
            return bytearray(response.read())
        at = 0
        for chunk in response.iter_raw():
            at = _fill(buffer, at, chunk)
        return _filled(buffer, at)
    finally:
        response.close()


async def aread_owned(response: httpx.Response):
    """``read_owned`` for an ``httpx.AsyncClient``'s streamed response."""
    try:
        buffer = _owned_buffer(response)
        if buffer is None:
            return bytearray(await response.aread())
        at = 0
        async for chunk in response.aiter_raw():
            at = _fill(buffer, at, chunk)
        return _filled(buffer, at)
    finally:
        await response.aclose()


def problem(response: httpx.Response) -> CalibrationError:
    """The typed exception of an error answer, with the problem document's fields."""
    status = response.status_code
    body: Any = None
    try:
        body = response.json()
    except ValueError:
        body = response.text
    fields = body if isinstance(body, dict) else {}
    detail = fields.get("detail")
    if not isinstance(detail, str):  # FastAPI's own 422 ({"detail": [...]}), /v2's {"error": ...}, a proxy's page
        detail = fields.get("error") if isinstance(fields.get("error"), str) else None
        detail = detail or (json.dumps(fields["detail"]) if "detail" in fields else None)
        detail = detail or (body.strip()[:500] if isinstance(body, str) and body.strip() else response.reason_phrase)
    return error_class(status)(
        detail, status=status, title=fields.get("title") or response.reason_phrase,
        type=fields.get("type") or "about:blank", instance=fields.get("instance") or response.request.url.path,
        request_id=fields.get("request_id") or response.headers.get("x-request-id"),
        headers=dict(response.headers), body=body)


# -- a plain-HTTP service -------------------------------------------------------------------


class PlainHTTPTransport(httpx.BaseTransport):
    """httpx's default transport for a service at an ``http://`` address, without reading the CA
    bundle: httpx makes an SSL context with every transport, certificates loaded (~70 ms of CPU,
    as much as a short ``calibration`` command's own work), which plain-HTTP connections never use.
    The plain connections get a context with no trusted certificate (nothing in TLS would verify,
    so nothing would connect), and the first ``https://`` request (an absolute URL, a redirect
    followed) makes httpx's default transport, certificates and all, for itself and later ones."""

    def __init__(self) -> None:
        self._plain = httpx.HTTPTransport(verify=ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
        self._tls: httpx.HTTPTransport | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme == "http":
            return self._plain.handle_request(request)
        if self._tls is None:
            self._tls = httpx.HTTPTransport()
        return self._tls.handle_request(request)

    def close(self) -> None:
        self._plain.close()
        if self._tls is not None:
            self._tls.close()


#: ``httpx.Client`` options that set up its transport: given any, the client leaves it to httpx
TRANSPORT_OPTIONS = frozenset({"transport", "verify", "cert", "http1", "http2", "limits", "proxy", "mounts"})


def plain_http_transport(url: str, options: dict) -> dict:
    """``options`` with a ``PlainHTTPTransport`` for an ``http://`` service where they leave the
    transport to httpx's defaults (else ``options`` as they are)."""
    if not url.startswith("http://") or TRANSPORT_OPTIONS & options.keys():
        return options
    return {**options, "transport": PlainHTTPTransport()}
