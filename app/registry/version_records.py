"""Stored versions read column by column, so that a damaged one is that version's problem, and
shown as the API shows them (``version_view``: as ``VersionOut`` describes it).

A version's columns are read as the database holds them (its JSON columns as text) and decoded
one row at a time; a row that cannot be decoded, or whose columns do not match their digest
(``app.registry.integrity``), raises ``IntegrityFailure`` naming the calibrator and the version. Getting
it is that problem; a listing shows the other versions and names the damaged ones beside them.
"""

from __future__ import annotations

import json
import typing
from dataclasses import fields
from datetime import datetime

import orjson
from sqlalchemy import String, Table, Text, cast, select, type_coerce
from sqlalchemy.orm import Session

from ..platform.errors import IntegrityFailure, NotFound, refused_as
from . import integrity, store
from .integrity import JSON_COLUMNS, StoredVersion, VersionRecord
from .rows import CalibratorRow, VersionRow


def version_view(name: str, row: VersionRow | StoredVersion, aliases: list[str]) -> dict:
    """A stored version (its row, or its record as read and checked) as the API shows it."""
    return {
        "name": name,
        "version": row.version,
        "method": row.method,
        "options": orjson.loads(row.params_json)["options"],
        "input": row.input_kind,
        "n_classes": row.n_classes,
        "n_samples": row.n_samples,
        "class_names": row.class_names,
        "parameters": row.summary,
        "diagnostics": row.diagnostics,
        "report": row.report,
        "description": row.description,
        "tags": row.tags,
        "tensor_names": row.tensor_names,
        "aliases": aliases,
        "checksum": row.checksum,
        "created_at": row.created_at,
    }


def _column(name: str):
    column = getattr(VersionRow, name)
    if name in JSON_COLUMNS:
        return cast(column, Text).label(name)  # the JSON text, parsed here row by row
    if name == "created_at":  # SQLite's text as it is (Postgres returns a timestamp)
        return type_coerce(column, String).label(name)
    return column


RAW = select(VersionRow.id, VersionRow.calibrator_id, VersionRow.checksum,
             *(_column(field.name) for field in fields(VersionRecord) if field.name != "name"))


def _where(name: str, version: int) -> str:
    return f"calibrator {name!r} version {version}"


def decode(name: str, raw) -> StoredVersion:
    """The version in a ``RAW`` row, its JSON columns parsed; ``IntegrityFailure`` for a column
    that does not parse."""
    values = raw._asdict()
    values.pop("calibrator_name", None)
    for column in (*JSON_COLUMNS, "created_at"):
        try:
            if column == "created_at":
                moment = values[column]
                values[column] = integrity.utc(moment if isinstance(moment, datetime)
                                               else datetime.fromisoformat(moment))
            elif values[column] is not None:
                values[column] = json.loads(values[column])
        except (TypeError, ValueError) as exc:
            raise IntegrityFailure(f"{_where(name, raw.version)} is damaged: its stored {column} cannot be read "
                                   f"({exc}); refusing to use it", calibrator=name, version=raw.version) from exc
    return StoredVersion(name=name, **values)


def checked(name: str, raw, key: bytes | None) -> StoredVersion:
    """The decoded version, its digest verified."""
    stored = decode(name, raw)
    refused = integrity.verify(stored.checksum, stored, key)
    if refused is not None:
        raise IntegrityFailure(f"{_where(name, stored.version)} failed its integrity check: {refused}; "
                               "refusing to use it", calibrator=name, version=stored.version)
    return stored


def view(name: str, raw, aliases: list[str], key: bytes | None) -> dict:
    """The version as the API shows it, or ``IntegrityFailure``."""
    stored = checked(name, raw, key)
    try:
        return version_view(name, stored, aliases)
    except (TypeError, ValueError, KeyError) as exc:  # only a first-format digest leaves columns unchecked
        raise IntegrityFailure(f"{_where(name, stored.version)} is damaged: {exc!r}", calibrator=name,
                               version=stored.version) from exc


def get(session: Session, name: str, version: int):
    """The ``RAW`` row of ``name``'s ``version`` (404 if there is none)."""
    raw = session.execute(RAW.join(CalibratorRow).where(CalibratorRow.name == name,
                                                       VersionRow.version == version)).first()
    if raw is None:
        store.calibrator_row(session, name)
        raise NotFound(f"calibrator {name!r} has no version {version}")
    return raw


def page(session: Session, name: str, page_size: int, page_token: str | None):
    """A page of ``name``'s ``RAW`` rows, newest first: its calibrator row, the rows and the next
    page's token."""
    calibrator = store.calibrator_row(session, name)
    query = (RAW.where(VersionRow.calibrator_id == calibrator.id)
             .order_by(VersionRow.version.desc()).limit(page_size + 1))
    if page_token:
        with refused_as(detail="invalid page_token"):
            before = int(store.decode_token(page_token))
        query = query.where(VersionRow.version < before)
    rows = list(session.execute(query))
    more = len(rows) > page_size
    rows = rows[:page_size]
    return calibrator, rows, store.encode_token(str(rows[-1].version)) if more and rows else None


def listing(session: Session, name: str, page_size: int, page_token: str | None, key: bytes | None) -> dict:
    """A page of ``name``'s versions as the API lists them: the intact ones in ``versions``, the
    damaged ones in ``damaged`` (the version and why)."""
    calibrator, rows, token = page(session, name, page_size, page_token)
    by_version: dict[int, list[str]] = {}
    for alias, number in store.aliases_of(session, calibrator.id).items():
        by_version.setdefault(number, []).append(alias)
    versions, damaged = [], []
    for raw in rows:
        try:
            versions.append(view(name, raw, by_version.get(raw.version, []), key))
        except IntegrityFailure as failure:
            damaged.append({"version": raw.version, "detail": failure.detail})
    return {"name": name, "versions": versions, "damaged": damaged, "next_page_token": token}


def for_serving(session: Session, resolved: store.ResolvedVersion) -> StoredVersion:
    """The record of a resolved version, decoded (its digest is checked by the loader), or 404 if
    it was deleted since it was resolved."""
    raw = session.execute(RAW.where(*store.same_version(resolved))).first()
    if raw is None:
        raise NotFound(f"calibrator {resolved.name!r} has no version {resolved.version}")
    return decode(resolved.name, raw)


def sign_versions(session: Session, key: bytes) -> tuple[int, list[str]]:
    """Sign with ``key`` (the whole record) every version whose digest is intact and not in that
    form yet; returns how many were signed and the versions refused (unreadable, or a digest that
    does not match: never signed over)."""
    signed, refused = 0, []
    rows = session.execute(RAW.add_columns(CalibratorRow.name.label("calibrator_name")).join(CalibratorRow))
    for raw in rows:
        name = raw.calibrator_name
        try:
            stored = decode(name, raw)
        except IntegrityFailure:
            refused.append(f"{name} v{raw.version}")
            continue
        if integrity.is_current(stored.checksum, key) and integrity.verify(stored.checksum, stored, key) is None:
            continue
        if integrity.verify(stored.checksum, stored, key) is None or \
                integrity.verify(stored.checksum, stored, None) is None:
            table = typing.cast(Table, VersionRow.__table__)  # a declared class's table (typed as any FromClause)
            session.execute(table.update().where(VersionRow.id == stored.id)
                            .values(checksum=integrity.digest(stored, key)))
            signed += 1
        else:
            refused.append(f"{name} v{raw.version}")
    return signed, refused
