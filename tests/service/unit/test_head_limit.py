"""The request head's limit (``RequestMiddleware``, ``CALIBRATION_MAX_HEADER_BYTES``): the head is
counted as its path, its query string and each header's name and value plus 4 bytes (``: `` and
the line's CRLF); a head of exactly the limit is served, one byte more is a 431."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from app.http.middleware import RequestMiddleware

HEADERS = [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/octet-stream"), (b"x-pad", b"abc")]
# 4 + 14 + 4 + 12 + 24 + 4 + 5 + 3 + 4 = 74 for the headers, + 13 for the path, + 3 for the query string
HEAD = 90


async def reached(scope, receive, send):
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def status(limit: int, pad: bytes = b"abc") -> int:
    scope = {"type": "http", "method": "GET", "path": "/v2/health/ok", "raw_path": b"/v2/health/ok",
             "query_string": b"a=1", "headers": [*HEADERS[:2], (b"x-pad", pad)]}
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    middleware = RequestMiddleware(reached, 1 << 20, CollectorRegistry(), max_header_bytes=limit)
    asyncio.run(middleware(scope, receive, send))
    return sent[0]["status"]


def test_a_head_of_exactly_the_limit_is_served_and_one_byte_more_is_431():
    assert status(HEAD) == 204
    assert status(HEAD - 1) == 431
    assert status(HEAD, pad=b"abcd") == 431
    assert status(HEAD + 1, pad=b"abcd") == 204
