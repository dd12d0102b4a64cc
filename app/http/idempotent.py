"""``Idempotency-Key`` on the POSTs that create something (``app.access.idempotency``): a retried
request gets the first one's answer, marked ``Idempotent-Replayed: true``. While a request is
answered, a task renews its claim's lease."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

from ..access.idempotency import IdempotencyKeys, StoredAnswer, request_digest
from ..platform.logs import first_line
from ..wire.decoding import RequestBody

logger = logging.getLogger(__name__)
REPLAYED_HEADERS = ("content-type", "location", "etag", "preference-applied")


async def idempotent(request: Request, body: RequestBody, answer: Callable[[], Awaitable[Response]]) -> Response:
    """``answer()``, or the stored answer of the first request with the same key."""
    key = request.headers.get("idempotency-key")
    if key is None:
        return await answer()
    keys: IdempotencyKeys = request.app.state.idempotency
    scope = f"{request.method} {request.url.path}"
    digest = request_digest(body.content_type or "", urlencode(sorted(body.query.items())), body.content)
    owner = keys.new_owner()
    stored = await run_in_threadpool(keys.claim, scope, key, digest, owner)
    if stored is not None:
        return Response(stored.content, status_code=stored.status_code,
                        headers={**stored.headers, "Idempotent-Replayed": "true"})
    renewing = asyncio.create_task(_renew(keys, scope, key, owner))
    try:
        try:
            response = await answer()
        finally:
            renewing.cancel()
    except BaseException:
        await run_in_threadpool(keys.release, scope, key, owner)
        raise
    if response.status_code >= 400:
        await run_in_threadpool(keys.release, scope, key, owner)
        return response
    headers = {name: value for name, value in response.headers.items() if name in REPLAYED_HEADERS}
    answered = StoredAnswer(response.status_code, bytes(response.body), headers)
    if not await run_in_threadpool(keys.store, scope, key, answered, owner):
        logger.warning("the claim of Idempotency-Key %r on %s was taken over while it was answered", key, scope)
    return response


async def _renew(keys: IdempotencyKeys, scope: str, key: str, owner: str) -> None:
    """Renew the claim's lease every third of it until cancelled (the request has its answer)."""
    while True:
        await asyncio.sleep(keys.lease_seconds / 3)
        try:
            if not await run_in_threadpool(keys.renew, scope, key, owner):
                logger.warning("the claim of Idempotency-Key %r on %s was taken over", key, scope)
                return
        except Exception as exc:  # the database is away: try again at the next beat
            logger.warning("renewing the claim of Idempotency-Key %r failed: %s", key, first_line(exc))
