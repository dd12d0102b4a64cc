"""Rows of the drift monitors: one calibrator's, one version's, and every monitor and coverage alarm
by calibrator name (for /metrics). Every function takes a session from ``Database.read()`` or
``write()``. The observation chunks and logged predictions that the monitors read come through
their domains' read APIs (``app.observations.reads``, ``app.prediction_log.reads``)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..registry import reads as registry
from .rows import DriftMonitorRow


def monitor(session: Session, calibrator_id: int, version: int, signal: str) -> DriftMonitorRow | None:
    return session.scalar(select(DriftMonitorRow).where(DriftMonitorRow.calibrator_id == calibrator_id,
                                                        DriftMonitorRow.version == version,
                                                        DriftMonitorRow.signal == signal))


def monitors(session: Session, calibrator_id: int) -> list[DriftMonitorRow]:
    return list(session.scalars(select(DriftMonitorRow).where(DriftMonitorRow.calibrator_id == calibrator_id)
                                .order_by(DriftMonitorRow.version, DriftMonitorRow.signal)))


def every_monitor(session: Session) -> list[tuple[str, int, str, float | None, float, bool]]:
    """(calibrator name, version, signal, ece, log e-value, alarmed) of every monitor, for /metrics."""
    rows = session.execute(select(DriftMonitorRow.calibrator_id, DriftMonitorRow.version, DriftMonitorRow.signal,
                                  DriftMonitorRow.ece, DriftMonitorRow.log_e_value,
                                  DriftMonitorRow.alarm_rows.is_not(None))).all()
    return _by_name(registry.calibrator_names(session), rows)


def coverage_states(session: Session, prefix: str) -> list[tuple[str, int, str, dict]]:
    """(calibrator name, version, signal, state) of every coverage alarm (signal starting ``prefix``)."""
    rows = session.execute(select(DriftMonitorRow.calibrator_id, DriftMonitorRow.version, DriftMonitorRow.signal,
                                  DriftMonitorRow.state).where(DriftMonitorRow.signal.startswith(prefix))).all()
    return _by_name(registry.calibrator_names(session), rows)


def _by_name(names: dict[int, str], rows) -> list[tuple]:
    """``rows`` (calibrator id, version, signal, ...) with the calibrator's name for its id, ordered by
    name (in the database's order of ``names``), version and signal."""
    place = {calibrator_id: at for at, calibrator_id in enumerate(names)}
    kept = sorted((row for row in rows if row[0] in place), key=lambda row: (place[row[0]], row[1], row[2]))
    return [(names[row[0]], *row[1:]) for row in kept]


