"""The database schema (owned by the Alembic migrations in ``migrations/``).

A calibrator has a unique name and a counter of the versions it has handed out; each fit is an
immutable version (numbers are never reused, also after a delete); aliases point at versions.
Parameters are stored as canonical JSON text; each version has a digest over every stored
column (``app.registry.integrity``), verified before it is shown or loaded (``app.registry.version_records``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator):
    """A timezone-aware UTC timestamp on every database: SQLite keeps no offset, so values read
    back from it get their UTC offset again (Postgres returns them aware already)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is not None and value.tzinfo is None:
            raise ValueError("timestamps must be timezone-aware")
        return value

    def process_result_value(self, value, dialect):
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


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


class RegistryGenerationRow(Base):
    """One row (``id`` 1) whose ``generation`` moves with every commit that changes what a
    reference resolves to (Postgres triggers, migration 0018; ``Database.data_version``)."""

    __tablename__ = "registry_generation"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger)


class JobRow(Base):
    """Long work (a fit, a comparison) run in the background: its input, progress and outcome.

    ``status`` is queued, running, succeeded, failed or cancelled; ``step`` says what a running
    job is doing, ``worker`` which process (host:pid) runs it; ``updated_at`` is its heartbeat.
    ``payload`` is its input (an ``.npz`` of the validated arrays) and ``request`` its small
    fields; ``result`` is the response body it would have returned, ``error`` a problem document."""

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_status_created_at", "status", "created_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16))
    percent: Mapped[float] = mapped_column(Float)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)
    calibrator: Mapped[str | None] = mapped_column(String(128), nullable=True, index=True)
    step: Mapped[str | None] = mapped_column(String(128), nullable=True)
    worker: Mapped[str | None] = mapped_column(String(128), nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    request: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    payload: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True, deferred=True)


class IdempotencyRow(Base):
    """A request sent with an ``Idempotency-Key``: the key (per operation), the sha256 of the
    request, and once it is answered the response to replay to a retry. While it is being answered,
    ``owner`` (the claiming process and request) holds it until ``lease_expires_at``, which that
    request renews as it runs; a lapsed lease means its process died."""

    __tablename__ = "idempotency_keys"

    scope: Mapped[str] = mapped_column(String(300), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    request_sha256: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    response: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    headers: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class ApiKeyRow(Base):
    """An API key: only the sha256 of the secret is stored; ``scopes`` is a space-separated
    subset of ``read write admin``; a revoked key keeps its row (for the audit trail)."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    secret_sha256: Mapped[str] = mapped_column(String(64))
    scopes: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class ObservationChunkRow(Base):
    """Labelled rows of a calibrator, appended in one request (``source`` upload) or joined from
    the prediction log when their labels came (``source`` feedback, with the ``version`` that
    served them). ``inputs`` holds the raw little-endian array (``dtype``, shape ``n_rows`` ×
    ``n_classes``, or ``n_rows`` binary scores), ``labels`` int32; ``class_counts`` the labels per
    class, so that summaries never read the arrays."""

    __tablename__ = "observation_chunks"
    __table_args__ = (Index("ix_observation_chunks_calibrator_created", "calibrator_id", "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    calibrator_id: Mapped[int] = mapped_column(ForeignKey("calibrators.id", ondelete="CASCADE"))
    source: Mapped[str] = mapped_column(String(16))
    version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    input_kind: Mapped[str] = mapped_column(String(16))
    n_rows: Mapped[int] = mapped_column(Integer)
    n_classes: Mapped[int] = mapped_column(Integer)
    dtype: Mapped[str] = mapped_column(String(8))
    class_counts: Mapped[list[int]] = mapped_column(JSON)
    inputs: Mapped[bytes] = mapped_column(LargeBinary, deferred=True)
    labels: Mapped[bytes] = mapped_column(LargeBinary, deferred=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class PredictionChunkRow(Base):
    """Calibrated inputs logged off the hot path in one batch: the rows of one calibrator version,
    raw little-endian (``dtype``), until their labels arrive (``LoggedPredictionRow`` indexes them)."""

    __tablename__ = "prediction_chunks"
    __table_args__ = (Index("ix_prediction_chunks_calibrator_created", "calibrator_id", "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    calibrator_id: Mapped[int] = mapped_column(ForeignKey("calibrators.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    input_kind: Mapped[str] = mapped_column(String(16))
    n_rows: Mapped[int] = mapped_column(Integer)
    n_classes: Mapped[int] = mapped_column(Integer)
    dtype: Mapped[str] = mapped_column(String(8))
    inputs: Mapped[bytes] = mapped_column(LargeBinary, deferred=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class PredictionEpochRow(Base):
    """A stretch of a calibrator's prediction log whose ids sit together in the id index (its key
    is ``(calibrator_id, epoch_id, prediction_id)``), so that random client ids fill a few
    recent pages instead of dirtying one page of the whole index each (migration 0011). A writer
    process opens it, writes to it (``written_at``) and closes it: ``bloom``, a Bloom filter of
    its ids (``app.prediction_log.bloom``, ``bloom_hashes`` hash functions), is null while it is open."""

    __tablename__ = "prediction_epochs"
    # never an id used before (SQLite's default reuses the largest after a delete): the API
    # processes keep closed epochs' filters by id
    __table_args__ = ({"sqlite_autoincrement": True},)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    calibrator_id: Mapped[int] = mapped_column(ForeignKey("calibrators.id", ondelete="CASCADE"), index=True)
    n_ids: Mapped[int] = mapped_column(Integer, default=0)  # index rows it holds: counted when closed, 0 while open
    bloom: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True, deferred=True)
    bloom_hashes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    written_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class LoggedPredictionRow(Base):
    """One logged prediction's id (the client's, or one the service generated), where its inputs
    are (chunk and row), and whether its label has arrived; in its epoch (``PredictionEpochRow``,
    deleted by retention once empty: no foreign key, whose trigger would cost every insert)."""

    __tablename__ = "logged_predictions"
    # on SQLite the primary key is the table (no rowid B-tree beside it): one B-tree insert per id
    __table_args__ = (Index("ix_logged_predictions_chunk_id", "chunk_id"), {"sqlite_with_rowid": False})

    calibrator_id: Mapped[int] = mapped_column(ForeignKey("calibrators.id", ondelete="CASCADE"), primary_key=True)
    epoch_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    prediction_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    chunk_id: Mapped[int] = mapped_column(ForeignKey("prediction_chunks.id", ondelete="CASCADE"))
    row: Mapped[int] = mapped_column(Integer)
    labelled: Mapped[bool] = mapped_column(Boolean, default=False)
    # ids this row stands for: 1; a batch of generated ids (``prefix,``: rows ``row`` to ``row + n_rows - 1``)
    # n_rows; a labelled generated id 0 (app.observations.store, migration 0009)
    n_rows: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    # a batch of generated ids that an earlier release sampled row by row: the numbers ``i`` of the ids
    # kept, sorted little-endian uint32, the ``j``-th at chunk row ``row + j`` (migration 0010); read,
    # no longer written (batches are now logged whole or not at all); else null
    kept: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
