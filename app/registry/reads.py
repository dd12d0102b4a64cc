"""What the other domains read of the registry inside their own transaction: a calibrator by name
(``CalibratorEntry``: its id, latest version number and log sample rate); a version's class count or
creation time; the newest version's id and method or its input shape; a version's row (for the
online updates that write the next); an alias's target and the /v2 default; every calibrator's name
by id and versions' names and numbers by row id; the prediction log's counts on the calibrator's
row. What they write of it is in ``app.registry.writes``. Each call takes the caller's session, so
that it sees the caller's writes and is part of its transaction; a name or version that does not
exist is ``NotFound`` (a 404). The registry's store and rows stay its own."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..platform.errors import NotFound
from ..platform.sql import IN_LIST
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


def version_classes(session: Session, name: str, version: int) -> int:
    """The class count of version ``version`` of ``name``; ``NotFound`` if it does not exist."""
    return store.get_version(session, name, version).n_classes


def version_created(session: Session, resolved: ResolvedVersion) -> datetime:
    """When a resolved version was stored; ``NotFound`` if it was deleted since it was resolved."""
    return store.version_by_id(session, resolved).created_at


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


def alias_target(session: Session, calibrator_id: int, alias: str) -> int | None:
    """The version ``alias`` points at, or ``None``."""
    return session.scalar(select(AliasRow.version).where(AliasRow.calibrator_id == calibrator_id,
                                                         AliasRow.alias == alias))


def v2_default(session: Session, calibrator_id: int) -> str | None:
    """The alias an unversioned /v2 call serves (``None``: the latest version)."""
    return session.scalar(select(CalibratorSettingRow.v2_default)
                          .where(CalibratorSettingRow.calibrator_id == calibrator_id))


# -- the prediction log's counts on the calibrator's row (migration 0015) ---------------------------

def any_logging(session: Session) -> bool:
    """Whether some calibrator logs its predictions (a sampling rate above 0)."""
    return session.scalar(select(CalibratorRow.id).where(CalibratorRow.log_sample_rate > 0).limit(1)) is not None


def logged_rows(session: Session, calibrator_id: int) -> int:
    """The rows the calibrator's prediction log holds, as last committed; ``NoResultFound`` without it."""
    return session.execute(select(CalibratorRow.logged_rows).where(CalibratorRow.id == calibrator_id)).scalar_one()


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
