"""What the registry's service and the other domains write of the registry inside their own
transaction: a fitted calibrator stored as the next version of a name (``write_version``, for a fit
and an online update alike: its parameters as canonical JSON, sorted keys, so that equal parameters
give equal text and equal digests, its summary and diagnostics beside them, the row sealed with its
digest, ``app.registry.integrity``); a calibrator created by name; its log sample rate; its row
locked (to order observation writes, or for an alias move's read-check-write); aliases and the /v2
default (moved by safe promotion, ``app.promotion.aliases``); and the prediction log's counts on the
calibrator's row (logged and dropped rows). Each call takes the caller's session and is part of its
transaction; a name or version that does not exist is ``NotFound`` (a 404). The registry's store
and rows stay its own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from ..platform.db import changed_rows
from ..platform.errors import NotFound
from ..platform.rows import utcnow
from ..platform.sql import dialect_insert
from . import store
from .reads import CalibratorEntry
from .rows import AliasRow, CalibratorRow, CalibratorSettingRow, VersionRow


def ensure_calibrator(session: Session, name: str) -> int:
    """The id of calibrator ``name``, created (with no versions) if it does not exist."""
    return store.ensure_calibrator(session, name)


def set_log_sample_rate(session: Session, name: str, rate: float) -> None:
    """Set the share of ``name``'s served rows that the prediction log keeps; ``NotFound`` if there
    is no calibrator ``name``."""
    store.calibrator_row(session, name).log_sample_rate = rate


def lock_calibrator(session: Session, calibrator_id: int) -> None:
    """Hold the calibrator's row until the transaction ends (``FOR NO KEY UPDATE`` on Postgres,
    which the foreign keys' ``FOR KEY SHARE`` of inserts do not block; SQLite's write transactions
    are serialised already), so that observation chunks of one calibrator commit in id order."""
    session.execute(select(CalibratorRow.id).where(CalibratorRow.id == calibrator_id).with_for_update(key_share=True))


def locked_calibrator(session: Session, name: str) -> CalibratorEntry:
    """Calibrator ``name`` with its row locked until the transaction ends (``SELECT ... FOR UPDATE``
    on Postgres; SQLite writes are serialised by ``BEGIN IMMEDIATE``), so that an alias move's
    version, gate and record are one consistent step even with several replicas; ``NotFound``
    without it."""
    row = session.scalar(select(CalibratorRow).where(CalibratorRow.name == name).with_for_update())
    if row is None:
        raise NotFound(f"no calibrator named {name!r}")
    return CalibratorEntry(row.id, row.name, row.last_version, row.log_sample_rate)


def point_alias(session: Session, name: str, calibrator_id: int, alias: str, version: int) -> None:
    """Point ``alias`` at ``version`` (which must exist: ``NotFound`` otherwise)."""
    store.get_version(session, name, version)
    now = utcnow()
    session.execute(
        dialect_insert(session)(AliasRow)
        .values(calibrator_id=calibrator_id, alias=alias, version=version, updated_at=now)
        .on_conflict_do_update(index_elements=["calibrator_id", "alias"], set_={"version": version, "updated_at": now})
    )


def remove_alias(session: Session, calibrator_id: int, alias: str) -> None:
    """Delete ``alias`` (nothing if it does not exist)."""
    session.execute(delete(AliasRow).where(AliasRow.calibrator_id == calibrator_id, AliasRow.alias == alias))


def set_v2_default(session: Session, calibrator_id: int, alias: str | None) -> None:
    """Make an unversioned /v2 call serve ``alias`` (``None``: the latest version)."""
    now = utcnow()
    session.execute(
        dialect_insert(session)(CalibratorSettingRow)
        .values(calibrator_id=calibrator_id, v2_default=alias, updated_at=now)
        .on_conflict_do_update(index_elements=["calibrator_id"], set_={"v2_default": alias, "updated_at": now}))


def add_logged_rows(session: Session, calibrator_id: int, n: int, cap: int | None = None) -> bool:
    """Add ``n`` (negative: take off) to the calibrator's logged rows, only if the sum stays within
    ``cap`` when given; whether it did. One conditional update: writers of several processes cannot
    pass the cap together."""
    where = [CalibratorRow.id == calibrator_id]
    if cap is not None:
        where.append(CalibratorRow.logged_rows + n <= cap)
    return changed_rows(session.execute(update(CalibratorRow).where(*where)
                                        .values(logged_rows=CalibratorRow.logged_rows + n)
                                        .execution_options(synchronize_session=False))) == 1


def add_dropped_rows(session: Session, calibrator_id: int, n: int) -> None:
    """Count ``n`` rows the calibrator's full log did not take."""
    session.execute(update(CalibratorRow).where(CalibratorRow.id == calibrator_id)
                    .values(log_dropped_rows=CalibratorRow.log_dropped_rows + n)
                    .execution_options(synchronize_session=False))

@dataclass(frozen=True)
class NewVersion:
    """A fitted ``calibrator`` and what describes it. ``params`` is its ``to_dict()`` (with the
    diagnostics to store, e.g. an online update's message); ``report`` is made JSON-safe on storing."""

    calibrator: Any
    params: dict
    input_kind: str
    n_classes: int
    n_samples: int
    report: dict = field(default_factory=dict)
    class_names: list[str] | None = None
    description: str | None = None
    tags: dict[str, str] | None = None
    tensor_names: dict[str, Any] | None = None


def write_version(session: Session, name: str, version: NewVersion, key: bytes | None) -> VersionRow:
    """Store ``version`` as the next version of ``name`` (creating the name), sealed with ``key``."""
    import calibration as cal  # here, not at the top: the prediction log's writer process imports this module

    return store.create_version(session, name, {
        "method": version.calibrator.method,
        "input_kind": version.input_kind,
        "n_classes": version.n_classes,
        "n_samples": version.n_samples,
        "class_names": version.class_names,
        "params_json": store.canonical_json(version.params),
        "summary": cal.json_safe(version.calibrator.summary()),
        "diagnostics": version.params["diagnostics"],
        "report": cal.json_safe(version.report),
        "description": version.description,
        "tags": version.tags,
        "tensor_names": version.tensor_names,
    }, key)
