"""API keys at rest: creation, listing and revocation (used by the CLI and by ``/v1/keys``).

A key reads ``cal_<id>_<secret>``: the 12-hex-digit ``id`` finds its row and the 256-bit
random ``secret`` makes it unguessable. Only ``sha256(key)`` is stored, so a leaked database
leaks no usable key; a fast hash is enough because the secret has full entropy (as GitHub's
and Stripe's tokens). The key itself is shown once, when it is created.

Scopes nest: ``admin`` (delete calibrators and versions, manage keys) includes ``write`` (fit,
move aliases), which includes ``read`` (get, list, calibrate, report, metrics, compare).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update

from ..platform.db import Database, changed_rows
from ..platform.rows import utcnow
from .rows import ApiKeyRow

SCOPES = ("read", "write", "admin")
KEY_PATTERN = re.compile(r"^cal_([0-9a-f]{12})_[A-Za-z0-9_-]{43}$")
NAME_PATTERN = re.compile(r"^[\w .@-]{1,128}$")


def checksum(key: str) -> str:
    """The SHA-256 of a key (hex): what is stored in place of the key."""
    return hashlib.sha256(key.encode()).hexdigest()


def implied_scopes(scopes: str) -> frozenset[str]:
    """The scopes a stored scope string grants: each scope and those below it."""
    highest = max((SCOPES.index(scope) for scope in scopes.split()), default=-1)
    return frozenset(SCOPES[: highest + 1])


def check_scopes(scopes: Sequence[str]) -> str:
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown or not scopes:
        raise ValueError(f"scopes must be a non-empty subset of {', '.join(SCOPES)}; got {', '.join(scopes) or 'none'}")
    return " ".join(scope for scope in SCOPES if scope in scopes)


def check_key_name(name: str) -> str:
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError("a key name is 1-128 letters, digits, spaces or '_.@-'")
    return name


@dataclass(frozen=True)
class KeyInfo:
    id: str
    name: str
    scopes: list[str]
    created_at: datetime
    revoked_at: datetime | None

    @classmethod
    def of(cls, row: ApiKeyRow) -> KeyInfo:
        return cls(row.id, row.name, row.scopes.split(), row.created_at, row.revoked_at)

    def as_dict(self) -> dict:
        return {"id": self.id, "name": self.name, "scopes": self.scopes,
                "created_at": self.created_at.isoformat(),
                "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None}


def create_key(database: Database, name: str, scopes: Sequence[str]) -> tuple[KeyInfo, str]:
    """Store a new key and return it with its secret (which is not stored anywhere)."""
    stored_scopes = check_scopes(scopes)
    check_key_name(name)
    key_id = secrets.token_hex(6)
    key = f"cal_{key_id}_{secrets.token_urlsafe(32)}"
    row = ApiKeyRow(id=key_id, name=name, secret_sha256=checksum(key), scopes=stored_scopes, created_at=utcnow())
    with database.write() as session:
        session.add(row)
    return KeyInfo.of(row), key


def list_keys(database: Database) -> list[KeyInfo]:
    with database.read() as session:
        return [KeyInfo.of(row) for row in session.scalars(select(ApiKeyRow).order_by(ApiKeyRow.created_at))]


def revoke_key(database: Database, key_id: str) -> bool:
    """Revoke a key; False when no active key has that id."""
    with database.write() as session:
        result = session.execute(update(ApiKeyRow).where(ApiKeyRow.id == key_id, ApiKeyRow.revoked_at.is_(None))
                                 .values(revoked_at=utcnow()))
        return changed_rows(result) == 1


def lookup(database: Database, key_id: str) -> tuple[str, frozenset[str]] | None:
    """The stored digest and granted scopes of an active key, or None."""
    with database.read() as session:
        row = session.execute(select(ApiKeyRow.secret_sha256, ApiKeyRow.scopes)
                              .where(ApiKeyRow.id == key_id, ApiKeyRow.revoked_at.is_(None))).first()
    return None if row is None else (row.secret_sha256, implied_scopes(row.scopes))
