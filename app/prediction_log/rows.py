"""The tables of the prediction log: logged calibrated inputs in binary chunks, the index of their
prediction ids (one row per client id, one per batch of generated ids) and the epochs that group
those ids."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, ForeignKey, Index, Integer, LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from ..platform.rows import Base, UTCDateTime, utcnow


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

    # no foreign key to calibrators: the chunk's key deletes the row with its calibrator, and checked
    # nothing more (its trigger cost Postgres ~2.6 us a row: migration 0019)
    calibrator_id: Mapped[int] = mapped_column(Integer, primary_key=True)
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
