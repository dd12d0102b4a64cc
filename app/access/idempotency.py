"""Idempotency keys (the IETF ``Idempotency-Key`` header draft, as Stripe uses it): a POST sent
again with the same key gets the first answer instead of doing the work twice.

The first request with a key claims it (a row keyed by operation and key, holding the sha256 of
the request); its answer is stored when it succeeds, and a claim whose request failed is let go
so that a retry runs it again. A retry with the same key and request gets the stored answer; one
that comes while the first is still being worked on gets 409 (retry shortly); the same key with
a different request is refused (422). Keys are forgotten after ``CALIBRATION_IDEMPOTENCY_SECONDS``.

A claim is held as a job is (its heartbeat): by an ``owner`` (the claiming request) until
``lease_expires_at``, which that request renews every third of
``CALIBRATION_IDEMPOTENCY_LEASE_SECONDS`` while it runs. A process that dies stops renewing: a
retry that finds an unanswered claim whose lease has lapsed takes it over (a conditional update,
so one retry wins) and runs the request again. Storing or letting go of a claim is done only by
its current owner, so a request that outlived its lease cannot overwrite its successor's answer.
"""

from __future__ import annotations

import hashlib
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import and_, delete, or_, update
from sqlalchemy.dialects import postgresql, sqlite

from ..platform.db import Database, changed_rows
from ..platform.errors import Conflict, InvalidInput
from ..platform.rows import utcnow
from .rows import IdempotencyRow

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
    def __init__(self, db: Database, ttl_seconds: float, lease_seconds: float = 30.0):
        self.db = db
        self.ttl = timedelta(seconds=ttl_seconds)
        self.lease_seconds = lease_seconds
        self.lease = timedelta(seconds=lease_seconds)

    @staticmethod
    def new_owner() -> str:
        """An owner id for one request: this process and a random part."""
        return f"{socket.gethostname()[:32]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"

    def _mine(self, scope: str, key: str, owner: str):
        return (IdempotencyRow.scope == scope, IdempotencyRow.key == key, IdempotencyRow.owner == owner,
                IdempotencyRow.status_code.is_(None))

    def claim(self, scope: str, key: str, digest: str, owner: str | None = None) -> StoredAnswer | None:
        """Claim ``key`` for this request as ``owner`` (default: a new owner) (``None``: go ahead),
        or the stored answer of the request that claimed it first. An unanswered claim whose lease
        lapsed is taken over."""
        if not 1 <= len(key) <= MAX_KEY_LENGTH or not key.isascii() or not key.isprintable():
            raise InvalidInput(f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} printable ASCII characters")
        owner = owner or self.new_owner()
        insert = postgresql.insert if self.db.dialect == "postgresql" else sqlite.insert
        now = utcnow()
        with self.db.write() as session:
            session.execute(delete(IdempotencyRow).where(IdempotencyRow.created_at < now - self.ttl))
            claimed = session.execute(insert(IdempotencyRow).values(scope=scope, key=key, request_sha256=digest,
                                                                    created_at=now, owner=owner,
                                                                    lease_expires_at=now + self.lease)
                                      .on_conflict_do_nothing().returning(IdempotencyRow.key)).first()
            if claimed is not None:
                return None
            row = session.get(IdempotencyRow, (scope, key))
            if row is None:  # let go (its request failed) since the insert met it
                raise Conflict("a request with this Idempotency-Key just failed; retry")
            same = row.request_sha256 == digest
            taken = same and row.status_code is None and changed_rows(session.execute(
                update(IdempotencyRow).where(
                    IdempotencyRow.scope == scope, IdempotencyRow.key == key, IdempotencyRow.status_code.is_(None),
                    or_(IdempotencyRow.lease_expires_at < now,  # its owner stopped renewing: it died
                        and_(IdempotencyRow.lease_expires_at.is_(None), IdempotencyRow.created_at < now - self.lease)))
                .values(owner=owner, lease_expires_at=now + self.lease))) == 1
        if not same:
            raise InvalidInput("this Idempotency-Key was used with a different request; use a new key")
        if taken:
            return None
        if row.status_code is None:
            raise Conflict("a request with this Idempotency-Key is still being processed; retry shortly")
        return StoredAnswer(row.status_code, row.response or b"", row.headers or {})

    def renew(self, scope: str, key: str, owner: str) -> bool:
        """Extend ``owner``'s lease on its unanswered claim; False when it no longer holds it."""
        with self.db.write() as session:
            return changed_rows(session.execute(update(IdempotencyRow).where(*self._mine(scope, key, owner))
                                                .values(lease_expires_at=utcnow() + self.lease))) == 1

    def store(self, scope: str, key: str, answer: StoredAnswer, owner: str) -> bool:
        """Keep the answer of ``owner``'s request for retries; False when another request took the
        claim over meanwhile (its answer stands)."""
        with self.db.write() as session:
            return changed_rows(session.execute(update(IdempotencyRow).where(*self._mine(scope, key, owner))
                                                .values(status_code=answer.status_code, response=answer.content,
                                                        headers=answer.headers, lease_expires_at=None))) == 1

    def release(self, scope: str, key: str, owner: str) -> None:
        """Let ``owner``'s claim go (its request failed): a retry runs the request again."""
        with self.db.write() as session:
            session.execute(delete(IdempotencyRow).where(*self._mine(scope, key, owner)))
