"""What the other domains read and write of the registry inside their own transaction: a calibrator
by name (``CalibratorEntry``: its id, latest version number and log sample rate), locked for an alias
move or not; a version's class count or creation time; the newest version's id and method or its
input shape; a version's row (for the online updates that write the next); the calibrator's row lock
that orders observation writes; every calibrator's name by id and versions' names and numbers by row
id; and the few writes other domains make: the log sample rate, aliases (moved by safe promotion,
``app.promotion.aliases``), the /v2 default, and the prediction log's counts on the calibrator's
row (logged and dropped rows). Each call takes the caller's session, so that it sees
the caller's writes and is part of its transaction; a name or version that does not exist is
``NotFound`` (a 404). The registry's store and rows stay its own."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from ..platform.db import changed_rows
from ..platform.errors import NotFound
from ..platform.rows import utcnow
from ..platform.sql import IN_LIST, dialect_insert
from . import store
from .names import ResolvedVersion
from .rows import AliasRow, CalibratorRow, CalibratorSettingRow, VersionRow


@dataclass(frozen=True)
class CalibratorEntry:
    """A calibrator as another domain sees it: its ``id`` (the key of their rows), ``name``, the
    number of its newest version (``last_version``, 0 before the first fit) and the share of served
    rows the prediction log keeps (``log_sample_rate``)."""

    id: int
    name: str
    last_version: int
    log_sample_rate: float


def calibrator(session: Session, name: str) -> CalibratorEntry:
    """Calibrator ``name``; ``NotFound`` if there is none."""
    row = store.calibrator_row(session, name)
    return CalibratorEntry(row.id, row.name, row.last_version, row.log_sample_rate)


def calibrator_id(session: Session, name: str) -> int:
    """The id of calibrator ``name``; ``NotFound`` if there is none."""
    return store.calibrator_row(session, name).id


def ensure_calibrator(session: Session, name: str) -> int:
    """The id of calibrator ``name``, created (with no versions) if it does not exist."""
    return store.ensure_calibrator(session, name)


def version_classes(session: Session, name: str, version: int) -> int:
    """The class count of version ``version`` of ``name``; ``NotFound`` if it does not exist."""
    return store.get_version(session, name, version).n_classes


def version_created(session: Session, resolved: ResolvedVersion) -> datetime:
    """When a resolved version was stored; ``NotFound`` if it was deleted since it was resolved."""
    return store.version_by_id(session, resolved).created_at


def set_log_sample_rate(session: Session, name: str, rate: float) -> None:
    """Set the share of ``name``'s served rows that the prediction log keeps; ``NotFound`` if there
    is no calibrator ``name``."""
    store.calibrator_row(session, name).log_sample_rate = rate


def lock_calibrator(session: Session, calibrator_id: int) -> None:
    """Hold the calibrator's row until the transaction ends (``FOR NO KEY UPDATE`` on Postgres,
    which the foreign keys' ``FOR KEY SHARE`` of inserts do not block; SQLite's write transactions
    are serialised already), so that observation chunks of one calibrator commit in id order."""
    session.execute(select(CalibratorRow.id).where(CalibratorRow.id == calibrator_id).with_for_update(key_share=True))


def latest_version(session: Session, calibrator_id: int) -> tuple[int, str] | None:
    """(row id, method) of the calibrator's newest version, without its parameters; ``None`` without one."""
    return session.execute(select(VersionRow.id, VersionRow.method).where(VersionRow.calibrator_id == calibrator_id)
                           .order_by(VersionRow.version.desc()).limit(1)).first()


def latest_shape(session: Session, calibrator_id: int) -> tuple[str, int] | None:
    """(input kind, class count) of the calibrator's newest version; ``None`` without one."""
    row = session.execute(select(VersionRow.input_kind, VersionRow.n_classes)
                          .where(VersionRow.calibrator_id == calibrator_id)
                          .order_by(VersionRow.version.desc()).limit(1)).first()
    return None if row is None else (row[0], row[1])


def version_row(session: Session, version_id: int) -> VersionRow:
    """The stored version with row id ``version_id`` (whole: what an online update of it reads)."""
    row = session.get(VersionRow, version_id)
    if row is None:  # (callers pass the id of a version read in the same transaction)
        raise NotFound(f"no stored version has row id {version_id}")
    return row


def calibrator_names(session: Session) -> dict[int, str]:
    """``{id: name}`` of every calibrator, in the database's order of names."""
    return dict(session.execute(select(CalibratorRow.id, CalibratorRow.name).order_by(CalibratorRow.name)).all())


def version_names(session: Session, version_ids: set[int]) -> dict[int, tuple[str, int]]:
    """``{version row id: (calibrator name, version number)}`` of the stored versions among ``version_ids``."""
    found: dict[int, tuple[str, int]] = {}
    ids = sorted(version_ids)
    for start in range(0, len(ids), IN_LIST):
        found.update((row[0], (row[1], row[2])) for row in session.execute(
            select(VersionRow.id, CalibratorRow.name, VersionRow.version)
            .join(CalibratorRow, VersionRow.calibrator_id == CalibratorRow.id)
            .where(VersionRow.id.in_(ids[start:start + IN_LIST]))))
    return found


def locked_calibrator(session: Session, name: str) -> CalibratorEntry:
    """Calibrator ``name`` with its row locked until the transaction ends (``SELECT ... FOR UPDATE``
    on Postgres; SQLite writes are serialised by ``BEGIN IMMEDIATE``), so that an alias move's
    version, gate and record are one consistent step even with several replicas; ``NotFound``
    without it."""
    row = session.scalar(select(CalibratorRow).where(CalibratorRow.name == name).with_for_update())
    if row is None:
        raise NotFound(f"no calibrator named {name!r}")
    return CalibratorEntry(row.id, row.name, row.last_version, row.log_sample_rate)


def alias_target(session: Session, calibrator_id: int, alias: str) -> int | None:
    """The version ``alias`` points at, or ``None``."""
    return session.scalar(select(AliasRow.version).where(AliasRow.calibrator_id == calibrator_id,
                                                         AliasRow.alias == alias))


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


def v2_default(session: Session, calibrator_id: int) -> str | None:
    """The alias an unversioned /v2 call serves (``None``: the latest version)."""
    return session.scalar(select(CalibratorSettingRow.v2_default)
                          .where(CalibratorSettingRow.calibrator_id == calibrator_id))


def set_v2_default(session: Session, calibrator_id: int, alias: str | None) -> None:
    """Make an unversioned /v2 call serve ``alias`` (``None``: the latest version)."""
    now = utcnow()
    session.execute(
        dialect_insert(session)(CalibratorSettingRow)
        .values(calibrator_id=calibrator_id, v2_default=alias, updated_at=now)
        .on_conflict_do_update(index_elements=["calibrator_id"], set_={"v2_default": alias, "updated_at": now}))


# -- the prediction log's counts on the calibrator's row (migration 0015) ---------------------------

def any_logging(session: Session) -> bool:
    """Whether some calibrator logs its predictions (a sampling rate above 0)."""
    return session.scalar(select(CalibratorRow.id).where(CalibratorRow.log_sample_rate > 0).limit(1)) is not None


def logged_rows(session: Session, calibrator_id: int) -> int:
    """The rows the calibrator's prediction log holds, as last committed; ``NoResultFound`` without it."""
    return session.execute(select(CalibratorRow.logged_rows).where(CalibratorRow.id == calibrator_id)).scalar_one()


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


def log_counts(session: Session, calibrator_id: int) -> tuple[int, int]:
    """The calibrator's logged rows and the rows its full log dropped."""
    logged, dropped = session.execute(select(CalibratorRow.logged_rows, CalibratorRow.log_dropped_rows)
                                      .where(CalibratorRow.id == calibrator_id)).one()
    return logged, dropped


def every_dropped(session: Session) -> list[tuple[str, int]]:
    """(name, dropped rows) of every calibrator whose log dropped rows, by name, for /metrics."""
    return [(name, dropped) for name, dropped in session.execute(
        select(CalibratorRow.name, CalibratorRow.log_dropped_rows).where(CalibratorRow.log_dropped_rows > 0)
        .order_by(CalibratorRow.name))]
