"""The table of adaptive set thresholds: per set predictor fitted with ``adaptive`` and per coverage
level, the state of its online conformal predictor (``calibration.AdaptiveConformal`` or ``DtACI``,
``to_dict()``: its calibration scores and the moving level), updated from the labels of the rows its
version served. Deleted with its set predictor (``ON DELETE CASCADE``). It shares ``Base`` (and so
the metadata Alembic compares)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from ..platform.rows import Base, UTCDateTime, utcnow


class AdaptiveSetRow(Base):
    """``method`` ``aci`` or ``dtaci``; ``level`` the miscoverage level ``alpha_t`` the sets are served
    at now; ``state`` the online predictor's ``to_dict()``; ``n_rows`` and ``covered_rows`` the labelled
    rows it was updated on and how many of them its sets (served before each label was used) held;
    ``last_chunk_id`` the newest observation chunk applied (the watermark: no label counts twice)."""

    __tablename__ = "adaptive_sets"
    __table_args__ = (UniqueConstraint("set_predictor_id", "coverage", name="uq_adaptive_sets_level"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    set_predictor_id: Mapped[int] = mapped_column(ForeignKey("set_predictors.id", ondelete="CASCADE"))
    coverage: Mapped[float] = mapped_column(Float)
    method: Mapped[str] = mapped_column(String(16))
    level: Mapped[float] = mapped_column(Float)
    state: Mapped[dict[str, Any]] = mapped_column(JSON)
    n_rows: Mapped[int] = mapped_column(Integer)
    covered_rows: Mapped[int] = mapped_column(Integer)
    last_chunk_id: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
