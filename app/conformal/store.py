"""Persistence of set predictors (``app.conformal.rows``): insert, list, get and delete the set
predictors of one calibrator version (by the version's row id), each sealed with a digest of every
stored column by the rules of versions (``app.registry.integrity``: ``sha256-v2:``, or keyed with
``CALIBRATION_INTEGRITY_KEY``). A row is deleted with its version by the foreign key."""

from __future__ import annotations

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from ..platform.errors import IntegrityFailure, NotFound
from ..platform.rows import utcnow
from ..registry import integrity
from ..registry import reads as registry
from .rows import SetPredictorRow

RECORD_COLUMNS = ("score", "options", "coverage", "params_json", "source", "n_samples", "created_at")


def record_values(name: str, version: int, row) -> dict:
    """What a set predictor's digest covers: the calibrator's name and version, and every stored
    column but its id and digest (JSON columns as read back from the database)."""
    return {"name": name, "version": version, **{column: getattr(row, column) for column in RECORD_COLUMNS}}


def insert(session: Session, name: str, version: int, version_id: int, fields: dict,
           key: bytes | None) -> SetPredictorRow:
    """Store a set predictor of the version (row id ``version_id``) with its digest."""
    row = SetPredictorRow(version_id=version_id, created_at=utcnow(), **fields)
    row.checksum = integrity.record_digest(record_values(name, version, row), key)
    session.add(row)
    session.flush()
    return row


def verified(name: str, version: int, row, key: bytes | None):
    """``row`` when its digest matches its columns, else ``IntegrityFailure`` naming it."""
    refused = integrity.verify_record(row.checksum, record_values(name, version, row), key)
    if refused is not None:
        raise IntegrityFailure(f"set predictor {row.id} of calibrator {name!r} version {version} failed its "
                               f"integrity check: {refused}; refusing to use it", calibrator=name, version=version)
    return row


def of_version(session: Session, version_id: int) -> list[SetPredictorRow]:
    """The version's set predictors, newest first."""
    return list(session.scalars(select(SetPredictorRow).where(SetPredictorRow.version_id == version_id)
                                .order_by(SetPredictorRow.id.desc())))


def levels_of_version(session: Session, version_id: int) -> list[tuple[int, list[float], str]]:
    """``(id, coverage levels, digest)`` of the version's set predictors, newest first (what serving
    chooses from)."""
    rows = session.execute(select(SetPredictorRow.id, SetPredictorRow.coverage, SetPredictorRow.checksum)
                           .where(SetPredictorRow.version_id == version_id).order_by(SetPredictorRow.id.desc()))
    return [(row.id, list(row.coverage), row.checksum) for row in rows]


def get(session: Session, name: str, version: int, version_id: int, predictor_id: int) -> SetPredictorRow:
    row = session.scalar(select(SetPredictorRow).where(SetPredictorRow.version_id == version_id,
                                                       SetPredictorRow.id == predictor_id))
    if row is None:
        raise NotFound(f"calibrator {name!r} version {version} has no set predictor {predictor_id}")
    return row


def remove(session: Session, name: str, version: int, version_id: int, predictor_id: int) -> None:
    row = get(session, name, version, version_id, predictor_id)
    session.execute(delete(SetPredictorRow).where(SetPredictorRow.id == row.id))


def sign_all(session: Session, key: bytes) -> tuple[int, list[str]]:
    """Sign with ``key`` every set predictor whose digest is intact (unkeyed, or keyed with ``key``)
    and not keyed yet (``calibration-service sign-versions``, after setting the key); returns how many
    were signed and the ones refused (a digest that does not match: never signed over)."""
    signed, refused = 0, []
    predictors = list(session.scalars(select(SetPredictorRow)))
    names = registry.version_names(session, {row.version_id for row in predictors})
    for row in predictors:
        if row.version_id not in names:
            continue
        name, version = names[row.version_id]
        values = record_values(name, version, row)
        if integrity.is_current(row.checksum, key) and integrity.verify_record(row.checksum, values, key) is None:
            continue
        if integrity.verify_record(row.checksum, values, None) is None:
            session.execute(update(SetPredictorRow).where(SetPredictorRow.id == row.id)
                            .values(checksum=integrity.record_digest(values, key)))
            signed += 1
        else:
            refused.append(f"{name} v{version} set predictor {row.id}")
    return signed, refused
