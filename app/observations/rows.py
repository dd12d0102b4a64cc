"""The table of the observations: labelled rows of a calibrator, stored as compact binary chunks (never
one row per float)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, ForeignKey, Index, Integer, LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from ..platform.rows import Base, UTCDateTime, utcnow


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
