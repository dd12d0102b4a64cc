"""Drift alarms told to a webhook, through an outbox: the transaction that records a new alarm
(``drift_alarms.evaluate``, from the evaluate endpoint or an ``alarms`` job) also writes one
delivery per URL (``queue_alarm``); the scheduler of each API process sends the due ones
(``deliver_due``).

One attempt is a POST of the alarm as JSON (Slack-compatible ``text``, plus the structured alarm
and the delivery ``id``) with the headers ``Webhook-Id`` (the same on every attempt: a receiver
deduplicates on it, as the Standard Webhooks convention says) and ``Webhook-Timestamp``. An
attempt has a *total* deadline (``CALIBRATION_WEBHOOK_DEADLINE_SECONDS``): connecting, sending
and reading the whole answer; a receiver that trickles its answer is cut off at it. A 2xx answer
delivers; anything else is retried, the ``n``-th retry ``backoff * 2**(n-1)`` seconds after the
failed attempt (``CALIBRATION_WEBHOOK_BACKOFF_SECONDS``), until ``CALIBRATION_WEBHOOK_ATTEMPTS``
attempts failed: then the delivery is ``failed`` with the last error. Delivery is at least once:
an attempt whose outcome could not be recorded (the process died) is made again, with the same id.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import math
import socket
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.orm import Session

from ..platform.db import Database
from ..platform.logs import first_line
from ..platform.rows import utcnow
from ..registry import reads as registry
from ..registry.names import check_name
from . import coverage_monitors, webhook_store
from .rows import DriftMonitorRow

logger = logging.getLogger(__name__)
ANSWER_BYTES = 65536  # of a receiver's answer read at most (its body is not used)
CLAIM_MARGIN_SECONDS = 30.0  # an attempt's claim outlasts its deadline by this: the outcome's write
LISTED = 100  # deliveries a listing shows, newest first


@dataclass(frozen=True)
class WebhookPolicy:
    """How deliveries are attempted: ``deadline`` seconds in all per attempt, ``attempts`` at most,
    ``backoff`` seconds before the first retry (doubled before each next)."""

    deadline: float = 10.0
    attempts: int = 5
    backoff: float = 30.0

    @classmethod
    def of(cls, settings) -> WebhookPolicy:
        return cls(settings.webhook_deadline_seconds, settings.webhook_attempts, settings.webhook_backoff_seconds)

    def retry_delay(self, attempt: int) -> float:
        """Seconds from failed attempt number ``attempt`` (from 1) to the next."""
        return self.backoff * 2 ** (attempt - 1)


def alarm_message(delivery_id: str, name: str, alarm: dict) -> dict:
    """The JSON POSTed for one alarm (``alarm``: version, signal, e_value, alpha, alarm_rows, ece,
    alarmed_at): Slack's ``text``, the alarm, and the delivery's ``id`` and ``type``
    (``calibration.coverage_alarm`` for a prediction sets' coverage monitor, whose signal is
    ``coverage@<level>``, else ``calibration.drift_alarm``)."""
    described = (f"version {alarm['version']} ({alarm['signal']}, e-value {alarm['e_value']:.3g} "
                 f"≥ 1/{alarm['alpha']:g})")
    kind = "coverage" if coverage_monitors.is_coverage(str(alarm["signal"])) else "drift"
    return {"id": delivery_id, "type": f"calibration.{kind}_alarm", "text": f"calibration {kind} alarm on {name}: "
            f"{described}", "calibrator": name, "alarm": alarm, "alarms": [alarm]}


def queue_alarm(session: Session, name: str, row: DriftMonitorRow, urls: list[str]) -> None:
    """One pending delivery per URL of the alarm just recorded on ``row``, in the same transaction."""
    alarm = {"version": row.version, "signal": row.signal, "e_value": _e_value(row.log_e_value),
             "alpha": row.alpha, "alarm_rows": row.alarm_rows, "ece": row.ece,
             "alarmed_at": row.alarmed_at.isoformat() if row.alarmed_at else None}
    for url in urls:
        delivery_id = uuid.uuid4().hex
        webhook_store.add(session, delivery_id, row.calibrator_id, row.version, row.signal, row.alarm_rows, url,
                          alarm_message(delivery_id, name, alarm))


def _e_value(log_e_value: float) -> float:
    return math.exp(min(log_e_value, 700.0))


def _shown(url: str) -> str:
    """``url`` without its path and query, which may hold a secret (Slack's webhook URLs do)."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}/…"


def post(url: str, delivery_id: str, message: dict, deadline: float) -> str | None:
    """POST ``message`` to ``url`` within ``deadline`` seconds in all; ``None`` when the answer was
    2xx, else what went wrong. A timer shuts the socket down at the deadline, which ends a read
    blocked on a receiver that sends its answer a byte at a time (a socket timeout bounds each
    read, not their sum)."""
    parts = urllib.parse.urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    body = json.dumps(message, default=str).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "calibration-service",
               "Webhook-Id": delivery_id, "Webhook-Timestamp": str(int(time.time()))}
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    started = time.monotonic()
    expired = threading.Event()
    connection = None

    def cut() -> None:
        expired.set()
        sock = connection.sock if connection is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed
                sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(deadline, cut)
    timer.daemon = True
    timer.start()
    try:
        connection = kind(parts.hostname or "", parts.port, timeout=deadline)
        connection.connect()  # bounded by the socket timeout (the deadline)
        left = deadline - (time.monotonic() - started)
        if expired.is_set() or left <= 0:
            raise TimeoutError
        connection.sock.settimeout(left)
        connection.request("POST", path, body, headers)
        answer = connection.getresponse()
        answer.read(ANSWER_BYTES)
        status = answer.status
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if expired.is_set() or isinstance(exc, TimeoutError):
            return f"no whole answer within the deadline of {deadline:g} s"
        return f"failed: {first_line(exc) or type(exc).__name__}"
    finally:
        timer.cancel()
        if connection is not None:
            connection.close()
    if expired.is_set():
        return f"no whole answer within the deadline of {deadline:g} s"
    return None if 200 <= status < 300 else f"answered {status}"


def deliver_due(db: Database, policy: WebhookPolicy) -> list[dict]:
    """Make one attempt of every delivery now due (those another process claims are skipped);
    returns ``{"id", "attempt", "state", "error"}`` of each attempt made."""
    with db.read() as session:
        due = webhook_store.due_ids(session, utcnow())
    made = []
    for delivery_id in due:
        now = utcnow()
        with db.write() as session:
            claimed = webhook_store.claim(session, delivery_id, now,
                                          now + timedelta(seconds=policy.deadline + CLAIM_MARGIN_SECONDS))
        if claimed is None:
            continue
        error = post(claimed.url, claimed.id, claimed.message, policy.deadline)
        if error is None:
            state, next_at = "delivered", utcnow()
        elif claimed.attempt >= policy.attempts:
            state, next_at = "failed", utcnow()
        else:
            state, next_at = "pending", utcnow() + timedelta(seconds=policy.retry_delay(claimed.attempt))
        if error is not None:
            logger.warning("webhook delivery %s attempt %d to %s: %s", claimed.id, claimed.attempt, claimed.url,
                           error)
        with db.write() as session:
            webhook_store.record(session, claimed, state, error, next_at)
        made.append({"id": claimed.id, "attempt": claimed.attempt, "state": state, "error": error})
    return made


def deliveries(db: Database, name: str) -> dict:
    """The newest deliveries of ``name``'s alarms, with their state."""
    check_name(name)
    with db.read() as session:
        calibrator = registry.calibrator(session, name)
        rows = webhook_store.for_calibrator(session, calibrator.id, LISTED)
        views = [{"id": row.id, "version": row.version, "signal": row.signal, "alarm_rows": row.alarm_rows,
                  "url": _shown(row.url), "state": row.state, "attempts": row.attempts,
                  "next_attempt_at": row.next_attempt_at if row.state == "pending" else None,
                  "last_error": row.last_error, "created_at": row.created_at, "delivered_at": row.delivered_at}
                 for row in rows]
    return {"name": name, "deliveries": views}
