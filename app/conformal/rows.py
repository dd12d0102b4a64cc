"""The table of set predictors: one row per split-conformal set predictor of a calibrator version
(``calibration.SetPredictor``), deleted with its version (``ON DELETE CASCADE``). It shares ``Base``
(and so the metadata Alembic compares)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from ..platform.rows import Base, UTCDateTime, utcnow


class SetPredictorRow(Base):
    """A set predictor of the version ``version_id``: its conformity ``score`` and ``options``
    (``k_reg``, ``lam``, ``randomized``, ``class_conditional``, ``seed``), the ``coverage`` levels it
    was fitted for, ``params_json`` (``SetPredictor.to_dict()`` as canonical JSON: the thresholds of
    every level), the ``source`` of its held-out rows (posted rows, or a query of the calibrator's
    stored observations) and their number ``n_samples``; ``checksum`` is the digest of every stored
    column (``app.conformal.store.record_values``, by the rules of ``app.registry.integrity``)."""

    __tablename__ = "set_predictors"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("calibrator_versions.id", ondelete="CASCADE"), index=True)
    score: Mapped[str] = mapped_column(String(16))
    options: Mapped[dict[str, Any]] = mapped_column(JSON)
    coverage: Mapped[list[float]] = mapped_column(JSON)
    params_json: Mapped[str] = mapped_column(Text)
    source: Mapped[dict[str, Any]] = mapped_column(JSON)
    n_samples: Mapped[int] = mapped_column(Integer)
    checksum: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
