"""The tables of access: API keys (only the sha256 of each secret) and the requests answered under
an ``Idempotency-Key``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Integer, LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from ..platform.rows import Base, UTCDateTime, utcnow


class IdempotencyRow(Base):
    """A request sent with an ``Idempotency-Key``: the key (per operation), the sha256 of the
    request, and once it is answered the response to replay to a retry. While it is being answered,
    ``owner`` (the claiming process and request) holds it until ``lease_expires_at``, which that
    request renews as it runs; a lapsed lease means its process died."""

    __tablename__ = "idempotency_keys"

    scope: Mapped[str] = mapped_column(String(300), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    request_sha256: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    response: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    headers: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)

class ApiKeyRow(Base):
    """An API key: only the sha256 of the secret is stored; ``scopes`` is a space-separated
    subset of ``read write admin``; a revoked key keeps its row (for the audit trail)."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    secret_sha256: Mapped[str] = mapped_column(String(64))
    scopes: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
