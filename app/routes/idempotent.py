"""``Idempotency-Key`` on the POSTs that create something (``app.idempotency``): a retried
request gets the first one's answer, marked ``Idempotent-Replayed: true``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

from ..decoding import RequestBody
from ..idempotency import IdempotencyKeys, StoredAnswer, request_digest

REPLAYED_HEADERS = ("content-type", "location", "etag", "preference-applied")


async def idempotent(request: Request, body: RequestBody, answer: Callable[[], Awaitable[Response]]) -> Response:
    """``answer()``, or the stored answer of the first request with the same key."""
    key = request.headers.get("idempotency-key")
    if key is None:
        return await answer()
    keys: IdempotencyKeys = request.app.state.idempotency
    scope = f"{request.method} {request.url.path}"
    digest = request_digest(body.content_type or "", urlencode(sorted(body.query.items())), body.content)
    stored = await run_in_threadpool(keys.claim, scope, key, digest)
    if stored is not None:
        return Response(stored.content, status_code=stored.status_code,
                        headers={**stored.headers, "Idempotent-Replayed": "true"})
    try:
        response = await answer()
    except BaseException:
        await run_in_threadpool(keys.release, scope, key)
        raise
    if response.status_code >= 400:
        await run_in_threadpool(keys.release, scope, key)
        return response
    headers = {name: value for name, value in response.headers.items() if name in REPLAYED_HEADERS}
    await run_in_threadpool(keys.store, scope, key, StoredAnswer(response.status_code, response.body, headers))
    return response
