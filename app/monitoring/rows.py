"""The tables of the drift monitors: per calibrator version, one monitor of the
labelled predictions it served (``signal`` "labelled") and one of its logged predictions without
labels (``signal`` "label_free"), each holding its anytime-valid e-process
(``calibration.monitoring.DriftTest``) and, once it crossed ``1/alpha``, its alarm; and the
webhook outbox, one delivery per new alarm and URL. It shares
``Base`` (and so the metadata Alembic compares, through ``app.all_rows``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from ..platform.rows import Base, UTCDateTime, utcnow


class DriftMonitorRow(Base):
    """The e-process of one version on the labelled rows it served (``source`` feedback; ``signal``
    "labelled") or on its logged predictions (``signal`` "label_free"; ``last_chunk_id`` then counts
    prediction chunks), fed chunk by chunk in arrival order up to ``last_chunk_id``: ``state`` is
    ``DriftTest.to_dict()`` (with the label-free monitor's fixed ``reference``);
    ``alarm_rows`` the labelled rows seen when the e-value first reached ``1/alpha`` and
    ``alarmed_at`` when the evaluation found it (both null while there is no alarm); ``ece`` the
    calibrated ECE of the last ``ece_rows`` of those rows, for the Prometheus gauge."""

    __tablename__ = "drift_monitors"
    __table_args__ = (UniqueConstraint("calibrator_id", "version", "signal", name="uq_drift_monitors_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    calibrator_id: Mapped[int] = mapped_column(ForeignKey("calibrators.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    signal: Mapped[str] = mapped_column(String(16))
    alpha: Mapped[float] = mapped_column(Float)
    tolerance: Mapped[float] = mapped_column(Float)
    n_rows: Mapped[int] = mapped_column(Integer)
    last_chunk_id: Mapped[int] = mapped_column(Integer)
    log_e_value: Mapped[float] = mapped_column(Float)
    max_log_e_value: Mapped[float] = mapped_column(Float)
    state: Mapped[dict[str, Any]] = mapped_column(JSON)
    ece: Mapped[float | None] = mapped_column(Float, nullable=True)
    ece_rows: Mapped[int] = mapped_column(Integer)
    alarm_rows: Mapped[int | None] = mapped_column(Integer, nullable=True)
    alarmed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    evaluated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class WebhookDeliveryRow(Base):
    """One new alarm to be POSTed to one URL (an outbox row), written in the transaction that
    records the alarm. ``id`` is the delivery's stable id (the ``Webhook-Id`` header and the body's
    ``id``, the same on every attempt, for the receiver to deduplicate on); ``message`` the JSON
    sent; ``state`` ``pending`` until an attempt got a 2xx (``delivered``) or the last allowed
    attempt failed (``failed``); ``attempts`` the attempts begun; ``next_attempt_at`` when the next
    may begin (while an attempt runs: when its claim lapses, so that a sender that died is
    replaced); ``last_error`` what the latest failed attempt met."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (Index("ix_webhook_deliveries_due", "state", "next_attempt_at"),
                      Index("ix_webhook_deliveries_calibrator", "calibrator_id", "created_at"))

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    calibrator_id: Mapped[int] = mapped_column(ForeignKey("calibrators.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    signal: Mapped[str] = mapped_column(String(16))
    alarm_rows: Mapped[int] = mapped_column(Integer)
    url: Mapped[str] = mapped_column(String(2000))
    message: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_error: Mapped[str | None] = mapped_column(String(500), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
