"""Persistence of calibrators, versions and aliases (the registry model of MLflow).

Every function takes a session from ``Database.read()`` or ``Database.write()``. A new version
is numbered and inserted in one write transaction: the calibrator row is created if missing
(``INSERT ... ON CONFLICT DO NOTHING``) and its ``last_version`` counter incremented with
``UPDATE ... RETURNING``, which serialises concurrent fits of one name on its row lock.
"""

from __future__ import annotations

import base64
import hashlib

import orjson
from sqlalchemy import bindparam, delete, func, or_, select
from sqlalchemy.orm import Session

from ..platform.db import Database
from ..platform.errors import Conflict, InvalidInput, NotFound
from ..platform.rows import utcnow
from ..platform.sql import dialect_insert
from . import integrity
from .names import Reference, ResolvedVersion
from .rows import AliasRow, CalibratorRow, CalibratorSettingRow, VersionRow

MAX_PAGE_SIZE = 1000


def canonical_json(value) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def checksum(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def calibrator_row(session: Session, name: str) -> CalibratorRow:
    row = session.scalar(select(CalibratorRow).where(CalibratorRow.name == name))
    if row is None:
        raise NotFound(f"no calibrator named {name!r}")
    return row


def ensure_calibrator(session: Session, name: str) -> int:
    """The id of calibrator ``name``, created (with no versions) if it does not exist."""
    session.execute(dialect_insert(session)(CalibratorRow).values(name=name, last_version=0, created_at=utcnow())
                    .on_conflict_do_nothing(index_elements=["name"]))
    return session.execute(select(CalibratorRow.id).where(CalibratorRow.name == name)).scalar_one()


def create_version(session: Session, name: str, fields: dict, key: bytes | None) -> VersionRow:
    """Store a new version of ``name`` (creating the name) with its digest (``seal``), numbered
    atomically: one upsert takes the next number (``INSERT ... ON CONFLICT DO UPDATE ...
    RETURNING``), so a fit racing a delete of its calibrator creates it again instead of finding it
    gone."""
    insert = dialect_insert(session)(CalibratorRow).values(name=name, last_version=1, created_at=utcnow())
    calibrator_id, number = session.execute(
        insert.on_conflict_do_update(index_elements=["name"],
                                     set_={"last_version": CalibratorRow.last_version + 1})
        .returning(CalibratorRow.id, CalibratorRow.last_version)
    ).one()
    row = VersionRow(calibrator_id=calibrator_id, version=number, created_at=utcnow(), **fields)
    seal(row, name, key)
    session.add(row)
    session.flush()
    return row


def seal(row: VersionRow, name: str, key: bytes | None) -> None:
    """Set the digest of every stored column of ``row`` (``app.registry.integrity``); again after a change."""
    row.checksum = integrity.digest(integrity.record_of(name, row), key)


def encode_token(value: str) -> str:
    return base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")


def decode_token(token: str) -> str:
    try:
        value = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_", validate=True).decode()
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput("invalid page_token") from exc
    if encode_token(value) != token:
        raise InvalidInput("invalid page_token")
    return value


def list_calibrators(session: Session, page_size: int, page_token: str | None):
    """Calibrators ordered by name, after the name in the token; returns rows and next token."""
    query = select(CalibratorRow).order_by(CalibratorRow.name).limit(page_size + 1)
    if page_token:
        query = query.where(CalibratorRow.name > decode_token(page_token))
    rows = list(session.scalars(query))
    more = len(rows) > page_size
    rows = rows[:page_size]
    return rows, encode_token(rows[-1].name) if more and rows else None


def calibrator_overview(session: Session, row: CalibratorRow) -> dict:
    counts = session.execute(
        select(func.count(VersionRow.id), func.max(VersionRow.version)).where(
            VersionRow.calibrator_id == row.id
        )
    ).one()
    return {
        "name": row.name,
        "created_at": row.created_at,
        "latest_version": counts[1],
        "n_versions": counts[0],
        "aliases": aliases_of(session, row.id),
    }


def get_calibrator(session: Session, name: str) -> dict:
    return calibrator_overview(session, calibrator_row(session, name))


def aliases_of(session: Session, calibrator_id: int) -> dict[str, int]:
    rows = session.execute(
        select(AliasRow.alias, AliasRow.version).where(AliasRow.calibrator_id == calibrator_id)
        .order_by(AliasRow.alias)
    )
    return {alias: version for alias, version in rows}


def get_version(session: Session, name: str, version: int) -> VersionRow:
    row = session.scalar(
        select(VersionRow).join(CalibratorRow)
        .where(CalibratorRow.name == name, VersionRow.version == version)
    )
    if row is None:
        calibrator_row(session, name)
        raise NotFound(f"calibrator {name!r} has no version {version}")
    return row


def _resolution_queries():
    base = select(CalibratorRow.name, VersionRow.version, VersionRow.checksum, VersionRow.id, CalibratorRow.id,
                  CalibratorRow.log_sample_rate).join(
        CalibratorRow, VersionRow.calibrator_id == CalibratorRow.id
    ).where(CalibratorRow.name == bindparam("name"))
    latest = base.order_by(VersionRow.version.desc()).limit(1)
    pinned = base.where(VersionRow.version == bindparam("version"))
    aliased = base.join(
        AliasRow,
        (AliasRow.calibrator_id == VersionRow.calibrator_id) & (AliasRow.version == VersionRow.version),
    ).where(AliasRow.alias == bindparam("alias"))
    # an unversioned /v2 call: the alias named in calibrator_settings, else the latest version
    v2_default = base.outerjoin(CalibratorSettingRow, CalibratorSettingRow.calibrator_id == CalibratorRow.id).outerjoin(
        AliasRow, (AliasRow.calibrator_id == CalibratorRow.id) & (AliasRow.alias == CalibratorSettingRow.v2_default)
    ).where(or_(CalibratorSettingRow.v2_default.is_(None), AliasRow.version == VersionRow.version))
    return latest, pinned, aliased, v2_default.order_by(VersionRow.version.desc()).limit(1)


# built once: constructing a statement costs more than running it on this hot path
LATEST, PINNED, ALIASED, V2_DEFAULT = _resolution_queries()
NAME_EXISTS = select(CalibratorRow.id).where(CalibratorRow.name == bindparam("name"))


def resolve(database: Database, reference: Reference) -> ResolvedVersion:
    """The version that ``name`` (latest, or on /v2 the calibrator's default), ``name@alias`` or
    ``name`` + pinned version means.

    One indexed query per call, outside any session (``Database.first_row``: this is the hot
    path), so every replica sees moves of aliases and new versions at once.
    """
    name, version, alias = reference.name, reference.version, reference.alias
    if alias is not None:
        row = database.first_row(ALIASED, {"name": name, "alias": alias})
    elif version is not None:
        row = database.first_row(PINNED, {"name": name, "version": version})
    elif reference.v2_default:
        row = database.first_row(V2_DEFAULT, {"name": name})
    else:
        row = database.first_row(LATEST, {"name": name})
    if row is None:
        if database.first_row(NAME_EXISTS, {"name": name}) is None:
            raise NotFound(f"no calibrator named {name!r}")
        if alias is not None:
            raise NotFound(f"calibrator {name!r} has no alias {alias!r}")
        if version is not None:
            raise NotFound(f"calibrator {name!r} has no version {version}")
        raise NotFound(f"calibrator {name!r} has no versions")
    return ResolvedVersion(*row)


def same_version(resolved: ResolvedVersion) -> tuple:
    """The row of ``resolved`` only if it is still that version: SQLite reuses the largest row id,
    so a version deleted and refitted after it was resolved may hold the same id."""
    return (VersionRow.id == resolved.version_id, VersionRow.version == resolved.version,
            VersionRow.checksum == resolved.checksum)


def version_by_id(session: Session, resolved: ResolvedVersion) -> VersionRow:
    """The row of a resolved version (a 404 if it was deleted since it was resolved)."""
    row = session.scalar(select(VersionRow).where(*same_version(resolved)))
    if row is None:
        raise NotFound(f"calibrator {resolved.name!r} has no version {resolved.version}")
    return row


def version_numbers(session: Session, name: str) -> list[int]:
    """The newest ``MAX_PAGE_SIZE`` version numbers of ``name``, ascending."""
    calibrator = calibrator_row(session, name)
    newest = session.scalars(select(VersionRow.version).where(VersionRow.calibrator_id == calibrator.id)
                             .order_by(VersionRow.version.desc()).limit(MAX_PAGE_SIZE))
    return sorted(newest)


def delete_calibrator(session: Session, name: str) -> None:
    calibrator = calibrator_row(session, name)
    session.execute(delete(AliasRow).where(AliasRow.calibrator_id == calibrator.id))
    session.execute(delete(VersionRow).where(VersionRow.calibrator_id == calibrator.id))
    session.execute(delete(CalibratorRow).where(CalibratorRow.id == calibrator.id))


def delete_version(session: Session, name: str, version: int) -> None:
    row = get_version(session, name, version)
    pointing = [a for a, v in aliases_of(session, row.calibrator_id).items() if v == version]
    if pointing:
        raise Conflict(
            f"version {version} of {name!r} is the target of alias(es) {', '.join(pointing)}; "
            "move or delete them first"
        )
    session.execute(delete(VersionRow).where(VersionRow.id == row.id))

