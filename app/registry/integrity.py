"""Integrity of stored versions: a digest over every stored column of a version, checked before
the version is shown or loaded (``app.registry.version_records``, ``cache.load_calibrator``).

The digest covers the version's ``VersionRecord``: the calibrator's name and the version's
number, method, input kind, k, n, class names, canonical parameter JSON, summary, diagnostics,
validation report, description, tags, tensor names and creation time (UTC, ISO 8601). It is
``sha256-v2:<digest>`` of the canonical JSON of that record (keys sorted at every level; JSON
columns as read back from the database), the 32 bytes in unpadded URL-safe base64 (43
characters, so every form fits the 64-character column), or, when ``CALIBRATION_INTEGRITY_KEY`` is
set, ``hmac-sha256-v2:<digest>`` keyed with it (RFC 2104), so that someone who can write to the
database but does not hold the key cannot forge or alter a calibrator. With a key set, unkeyed
digests are refused: ``calibration-service sign-versions`` signs the versions stored before the
key was set. Digests are compared in constant time.

The first digests (``sha256:`` and ``hmac-sha256:``, of ``[params_json, class_names,
tensor_names]`` only) still verify: migration 0014 moves intact unkeyed ones to the whole record,
and ``sign-versions`` re-signs keyed ones.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

import orjson

SHA256, HMAC = "sha256:", "hmac-sha256:"  # the first format: parameters and names only
RECORD_SHA256, RECORD_HMAC = "sha256-v2:", "hmac-sha256-v2:"  # the whole record
JSON_COLUMNS = ("class_names", "summary", "diagnostics", "report", "tags", "tensor_names")


@dataclass(frozen=True)
class VersionRecord:
    """Everything stored with a version (its JSON columns as parsed), as the digest covers it."""

    name: str
    version: int
    method: str
    input_kind: str
    n_classes: int
    n_samples: int
    class_names: list | None
    params_json: str
    summary: Any
    diagnostics: Any
    report: Any
    description: str | None
    tags: Any
    tensor_names: Any
    created_at: datetime


@dataclass(frozen=True)
class StoredVersion(VersionRecord):
    """A version's record with the row's id, its calibrator's id and its stored digest."""

    id: int
    calibrator_id: int
    checksum: str


def utc(moment: datetime) -> datetime:
    """``moment`` in UTC (a naive one, as SQLite returns it, is UTC already)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def record_of(name: str, row) -> VersionRecord:
    """The record of a version row (or anything with its attributes) as it reads back from the
    database: its JSON columns through the JSON text the database stores (``json.dumps``, as
    SQLAlchemy writes them), so that a digest computed before the row is stored verifies after."""
    values = {field.name: getattr(row, field.name) for field in fields(VersionRecord) if field.name != "name"}
    for column in JSON_COLUMNS:
        values[column] = json.loads(json.dumps(values[column]))
    return VersionRecord(name=name, **values)


def _record_message(record: VersionRecord) -> bytes:
    values = {field.name: getattr(record, field.name) for field in fields(VersionRecord)}
    values["created_at"] = utc(record.created_at).isoformat(timespec="microseconds")
    return orjson.dumps(values, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


def _first_message(record: VersionRecord) -> bytes:
    return orjson.dumps([record.params_json, record.class_names, record.tensor_names], option=orjson.OPT_SORT_KEYS)


def _sign(message: bytes, key: bytes | None, unkeyed: str, keyed: str) -> str:
    if key:
        return keyed + _text(hmac.new(key, message, hashlib.sha256).digest())
    return unkeyed + _text(hashlib.sha256(message).digest())


def digest(record: VersionRecord, key: bytes | None) -> str:
    """The digest to store with a version."""
    return _sign(_record_message(record), key, RECORD_SHA256, RECORD_HMAC)


def record_digest(values: dict, key: bytes | None) -> str:
    """The digest of another stored record (a set predictor's, ``app.conformal.store``) given as a dict
    of its JSON-ready values (``created_at`` a datetime): by the same rules as a version's, the
    canonical JSON of the dict (keys sorted at every level, the time in UTC ISO 8601), hashed
    (``sha256-v2:``) or keyed with ``CALIBRATION_INTEGRITY_KEY`` (``hmac-sha256-v2:``)."""
    return _sign(_values_message(values), key, RECORD_SHA256, RECORD_HMAC)


def verify_record(stored: str, values: dict, key: bytes | None) -> str | None:
    """``None`` when ``stored`` is the right ``record_digest`` of ``values``, else why it is refused
    (compared in constant time; keyed and unkeyed digests follow ``verify``'s rules)."""
    keyed = stored.startswith(RECORD_HMAC)
    if key and not keyed:
        return "it is not signed with CALIBRATION_INTEGRITY_KEY"
    if keyed and not key:
        return "it is signed with an integrity key and CALIBRATION_INTEGRITY_KEY is not set"
    if hmac.compare_digest(record_digest(values, key), stored):
        return None
    return "its stored columns do not match their digest"


def _values_message(values: dict) -> bytes:
    values = {**values, "created_at": utc(values["created_at"]).isoformat(timespec="microseconds")}
    return orjson.dumps(values, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


def _text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def is_current(stored: str, key: bytes | None) -> bool:
    """Whether ``stored`` has the form a version stored now would get (whole record, keyed if
    there is a key)."""
    return stored.startswith(RECORD_HMAC if key else RECORD_SHA256)


def verify(stored: str, record: VersionRecord, key: bytes | None) -> str | None:
    """``None`` when ``stored`` is the right digest of ``record``, else why it is refused."""
    keyed = stored.startswith((RECORD_HMAC, HMAC))
    if key and not keyed:
        return "it is not signed with CALIBRATION_INTEGRITY_KEY (run `calibration-service sign-versions`)"
    if keyed and not key:
        return "it is signed with an integrity key and CALIBRATION_INTEGRITY_KEY is not set"
    if stored.startswith((SHA256, HMAC)):
        expected = _sign(_first_message(record), key, SHA256, HMAC)
        return None if hmac.compare_digest(expected, stored) else "its parameters or names do not match their digest"
    if hmac.compare_digest(digest(record, key), stored):
        return None
    return "its stored columns (parameters, names, report, ...) do not match their digest"
