"""The tables of the registry: calibrator names, their immutable versions, their aliases and
what an unversioned /v2 call serves (``calibrator_settings``).

A calibrator has a unique name and a counter of the versions it has handed out; each fit is an
immutable version (numbers are never reused, also after a delete); aliases point at versions.
Parameters are stored as canonical JSON text; each version has a digest over every stored
column (``app.registry.integrity``), verified before it is shown or loaded (``app.registry.version_records``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from ..platform.rows import Base, UTCDateTime, utcnow


class CalibratorRow(Base):
    __tablename__ = "calibrators"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    last_version: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    log_sample_rate: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")  # share of rows logged
    # the prediction log's rows, and those not logged because it held CALIBRATION_MAX_LOGGED_ROWS (0015)
    logged_rows: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    log_dropped_rows: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    versions: Mapped[list[VersionRow]] = relationship(back_populates="calibrator", passive_deletes=True)

class VersionRow(Base):
    __tablename__ = "calibrator_versions"
    __table_args__ = (UniqueConstraint("calibrator_id", "version", name="uq_calibrator_versions_number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    calibrator_id: Mapped[int] = mapped_column(ForeignKey("calibrators.id", ondelete="CASCADE"), index=True)
    version: Mapped[int] = mapped_column(Integer)
    method: Mapped[str] = mapped_column(String(64))
    input_kind: Mapped[str] = mapped_column(String(16))
    n_classes: Mapped[int] = mapped_column(Integer)
    n_samples: Mapped[int] = mapped_column(Integer)
    class_names: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    params_json: Mapped[str] = mapped_column(Text)
    checksum: Mapped[str] = mapped_column(String(64))
    summary: Mapped[dict[str, Any]] = mapped_column(JSON)
    diagnostics: Mapped[dict[str, Any]] = mapped_column(JSON)
    report: Mapped[dict[str, Any]] = mapped_column(JSON)
    description: Mapped[str | None] = mapped_column(Text, nullable=True)
    tags: Mapped[dict[str, str] | None] = mapped_column(JSON, nullable=True)
    tensor_names: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    calibrator: Mapped[CalibratorRow] = relationship(back_populates="versions")

class AliasRow(Base):
    __tablename__ = "aliases"
    __table_args__ = (
        ForeignKeyConstraint(
            ["calibrator_id", "version"],
            ["calibrator_versions.calibrator_id", "calibrator_versions.version"],
            name="fk_aliases_version_calibrator_versions",
        ),
    )

    calibrator_id: Mapped[int] = mapped_column(
        ForeignKey("calibrators.id", ondelete="CASCADE"), primary_key=True
    )
    alias: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)


class CalibratorSettingRow(Base):
    """Per-calibrator serving settings: ``v2_default`` is the alias an unversioned /v2 call
    serves (null: the latest version); the registry's resolution reads it, safe promotion
    (``app.promotion.aliases``) sets it."""

    __tablename__ = "calibrator_settings"

    calibrator_id: Mapped[int] = mapped_column(ForeignKey("calibrators.id", ondelete="CASCADE"), primary_key=True)
    v2_default: Mapped[str | None] = mapped_column(String(64), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class RegistryGenerationRow(Base):
    """One row (``id`` 1) whose ``generation`` moves with every commit that changes what a
    reference resolves to (Postgres triggers, migration 0018; ``Database.data_version``)."""

    __tablename__ = "registry_generation"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger)
