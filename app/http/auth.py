"""Access control for the routes: ``authorize("read" | "write" | "admin")`` is a FastAPI
dependency; ``openapi.document_common_errors`` shows it in ``/docs`` as the ``ApiKey`` and
``Bearer`` security schemes. With ``CALIBRATION_API_KEYS_ENABLED=false`` (the default) it lets
everything through. It reads the two headers itself: FastAPI's ``APIKeyHeader`` and
``HTTPBearer`` sub-dependencies cost ~55 µs a request on the hot path, keys on or off.

A request presents its key in ``X-API-Key`` or as ``Authorization: Bearer <key>``. Missing,
malformed, unknown or revoked keys get 401; a key without the scope gets 403. The digest is
compared with ``hmac.compare_digest`` (constant time). Looked-up keys are cached per process
for ``CALIBRATION_API_KEY_CACHE_SECONDS`` (default 5 s), so a revocation reaches every replica
within that time and the hot path does not query the database on each request. Keys are never
logged: the access log records method, path, status and timing only.
"""

from __future__ import annotations

import hmac
import time

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool

from ..access import keys
from ..platform.db import Database
from .problems import Problem

SECURITY_SCHEMES = {
    "ApiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key",
               "description": "An API key (`calibration-service keys create`); needed only when "
                              "CALIBRATION_API_KEYS_ENABLED=true."},
    "Bearer": {"type": "http", "scheme": "bearer",
               "description": "The same API key as `Authorization: Bearer <key>`."},
}
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="calibration"'}
MAX_CACHED = 10_000


def unauthorized(detail: str) -> Problem:
    return Problem(401, detail, headers=CHALLENGE)


class KeyVerifier:
    """Checks presented keys against the database, caching lookups for ``ttl`` seconds."""

    def __init__(self, database: Database, ttl: float):
        self.database = database
        self.ttl = ttl
        self._cache: dict[str, tuple[float, tuple[str, frozenset[str]] | None]] = {}

    def _cached(self, key_id: str):
        hit = self._cache.get(key_id)
        if hit is not None and time.monotonic() - hit[0] < self.ttl:
            return True, hit[1]
        return False, None

    def _fetch(self, key_id: str):
        found = keys.lookup(self.database, key_id)
        if len(self._cache) >= MAX_CACHED:
            self._cache.clear()
        self._cache[key_id] = (time.monotonic(), found)
        return found

    async def scopes(self, presented: str) -> frozenset[str]:
        match = keys.KEY_PATTERN.match(presented)
        if match is None:
            raise unauthorized("the API key is malformed")
        key_id = match.group(1)
        hit, found = self._cached(key_id)
        if not hit:
            found = await run_in_threadpool(self._fetch, key_id)
        if found is None or not hmac.compare_digest(keys.checksum(presented), found[0]):
            raise unauthorized("the API key is unknown or revoked")
        return found[1]


def presented_key(request: Request) -> str | None:
    """The key in ``X-API-Key``, else in ``Authorization: Bearer <key>`` (scheme in any case)."""
    key = request.headers.get("x-api-key")
    if key:
        return key
    scheme, _, credentials = (request.headers.get("authorization") or "").partition(" ")
    return credentials if scheme.lower() == "bearer" and credentials else None


def authorize(scope: str):
    """A dependency that lets the request through when keys are off or its key has ``scope``."""
    if scope not in keys.SCOPES:
        raise ValueError(f"unknown scope {scope!r}")

    async def check(request: Request) -> None:
        verifier: KeyVerifier | None = request.app.state.keys
        if verifier is None:
            return
        presented = presented_key(request)
        if not presented:
            raise unauthorized("an API key is required: send it in the X-API-Key header "
                               "or as Authorization: Bearer <key>")
        if scope not in await verifier.scopes(presented):
            raise Problem(403, f"this API key lacks the '{scope}' scope")

    CHECKS.add(check)
    return Depends(check)


CHECKS: set = set()  # the dependencies authorize() made: operations using one need a key
READ = authorize("read")
WRITE = authorize("write")
ADMIN = authorize("admin")
