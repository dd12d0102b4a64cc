"""Idempotency keys (the IETF ``Idempotency-Key`` header draft, as Stripe uses it): a POST sent
again with the same key gets the first answer instead of doing the work twice.

The first request with a key claims it (a row keyed by operation and key, holding the sha256 of
the request); its answer is stored when it succeeds, and a claim whose request failed is let go
so that a retry runs it again. A retry with the same key and request gets the stored answer; one
that comes while the first is still being worked on gets 409 (retry shortly); the same key with
a different request is refused (422). Keys are forgotten after ``CALIBRATION_IDEMPOTENCY_SECONDS``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, update
from sqlalchemy.dialects import postgresql, sqlite

from .db import Database
from .errors import Conflict, InvalidInput
from .models import IdempotencyRow, utcnow

MAX_KEY_LENGTH = 255


@dataclass(frozen=True)
class StoredAnswer:
    status_code: int
    content: bytes
    headers: dict


def request_digest(*parts: bytes | str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


class IdempotencyKeys:
    def __init__(self, db: Database, ttl_seconds: float):
        self.db = db
        self.ttl = timedelta(seconds=ttl_seconds)

    def claim(self, scope: str, key: str, digest: str) -> StoredAnswer | None:
        """Claim ``key`` for this request (``None``: go ahead), or the stored answer of the
        request that claimed it first."""
        if not 1 <= len(key) <= MAX_KEY_LENGTH or not key.isascii() or not key.isprintable():
            raise InvalidInput(f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} printable ASCII characters")
        insert = postgresql.insert if self.db.dialect == "postgresql" else sqlite.insert
        with self.db.write() as session:
            session.execute(delete(IdempotencyRow).where(IdempotencyRow.created_at < utcnow() - self.ttl))
            claimed = session.execute(insert(IdempotencyRow).values(scope=scope, key=key, request_sha256=digest,
                                                                    created_at=utcnow())
                                      .on_conflict_do_nothing().returning(IdempotencyRow.key)).first()
            if claimed is not None:
                return None
            row = session.get(IdempotencyRow, (scope, key))
        if row.request_sha256 != digest:
            raise InvalidInput("this Idempotency-Key was used with a different request; use a new key")
        if row.status_code is None:
            raise Conflict("a request with this Idempotency-Key is still being processed; retry shortly")
        return StoredAnswer(row.status_code, row.response or b"", row.headers or {})

    def store(self, scope: str, key: str, answer: StoredAnswer) -> None:
        with self.db.write() as session:
            session.execute(update(IdempotencyRow).where(IdempotencyRow.scope == scope, IdempotencyRow.key == key)
                            .values(status_code=answer.status_code, response=answer.content, headers=answer.headers))

    def release(self, scope: str, key: str) -> None:
        """Let a claim go (its request failed): a retry runs the request again."""
        with self.db.write() as session:
            session.execute(delete(IdempotencyRow).where(IdempotencyRow.scope == scope, IdempotencyRow.key == key,
                                                         IdempotencyRow.status_code.is_(None)))
