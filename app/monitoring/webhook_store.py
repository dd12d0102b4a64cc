"""Rows of the webhook outbox (``WebhookDeliveryRow``): one per new drift alarm and URL. Every
function takes a session from ``Database.read()`` or ``write()``.

An attempt is claimed by a conditional update (``... WHERE state = 'pending' AND next_attempt_at
<= now``) that counts it and moves ``next_attempt_at`` past the attempt's deadline: two processes
that find the same delivery due cannot both send it, and a sender that dies mid-attempt is
replaced once that time passes. Its outcome is written only by the attempt that claimed it (the
``attempts`` it counted)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ..platform.db import rows_matched
from ..platform.rows import utcnow
from .rows import WebhookDeliveryRow

STATES = ("pending", "delivered", "failed")


@dataclass(frozen=True)
class Claimed:
    """An attempt this process may make: the delivery, where to, what, and its number (from 1)."""

    id: str
    url: str
    message: dict
    attempt: int


def add(session: Session, delivery_id: str, calibrator_id: int, version: int, signal: str, alarm_rows: int,
        url: str, message: dict) -> None:
    """A pending delivery, due at once (in the caller's transaction: the one that records the alarm)."""
    now = utcnow()
    session.add(WebhookDeliveryRow(id=delivery_id, calibrator_id=calibrator_id, version=version, signal=signal,
                                   alarm_rows=alarm_rows, url=url, message=message, state="pending", attempts=0,
                                   next_attempt_at=now, created_at=now))


def due_ids(session: Session, now: datetime) -> list[str]:
    """The pending deliveries whose next attempt may begin, oldest first."""
    return list(session.scalars(select(WebhookDeliveryRow.id).where(WebhookDeliveryRow.state == "pending",
                                                                    WebhookDeliveryRow.next_attempt_at <= now)
                                .order_by(WebhookDeliveryRow.created_at, WebhookDeliveryRow.id)))


def claim(session: Session, delivery_id: str, now: datetime, held_until: datetime) -> Claimed | None:
    """Begin the next attempt of ``delivery_id`` if it is still due (``None``: another process took
    it, or it is no longer pending); nobody else begins one before ``held_until``."""
    taken = session.execute(update(WebhookDeliveryRow)
                            .where(WebhookDeliveryRow.id == delivery_id, WebhookDeliveryRow.state == "pending",
                                   WebhookDeliveryRow.next_attempt_at <= now)
                            .values(attempts=WebhookDeliveryRow.attempts + 1, next_attempt_at=held_until))
    if rows_matched(taken) != 1:
        return None
    row = session.execute(select(WebhookDeliveryRow.url, WebhookDeliveryRow.message, WebhookDeliveryRow.attempts)
                          .where(WebhookDeliveryRow.id == delivery_id)).one()
    return Claimed(delivery_id, row.url, row.message, row.attempts)


def record(session: Session, claimed: Claimed, state: str, error: str | None, next_attempt_at: datetime) -> bool:
    """The outcome of the attempt ``claimed``: ``state`` (pending again for a retry at
    ``next_attempt_at``), and its ``error``; False when that attempt is no longer the latest (it
    outlived its claim and another process began the next one)."""
    values: dict = {"state": state, "next_attempt_at": next_attempt_at}
    if error is not None:
        values["last_error"] = error[:500]
    if state == "delivered":
        values["delivered_at"] = utcnow()
    done = session.execute(update(WebhookDeliveryRow)
                           .where(WebhookDeliveryRow.id == claimed.id, WebhookDeliveryRow.state == "pending",
                                  WebhookDeliveryRow.attempts == claimed.attempt).values(**values))
    return rows_matched(done) == 1


def for_calibrator(session: Session, calibrator_id: int, limit: int) -> list[WebhookDeliveryRow]:
    """The newest ``limit`` deliveries of ``calibrator_id``'s alarms, newest first."""
    return list(session.scalars(select(WebhookDeliveryRow).where(WebhookDeliveryRow.calibrator_id == calibrator_id)
                                .order_by(WebhookDeliveryRow.created_at.desc(), WebhookDeliveryRow.id)
                                .limit(limit)))
