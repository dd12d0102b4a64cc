"""Persistence of adaptive set thresholds (``app.conformal.adaptive_rows``): add a state, read the
states of set predictors and the level one serves at, and store an update unless another update moved
the state first. Every function takes a session from ``Database.read()`` or ``write()``."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..platform.rows import utcnow
from .adaptive_rows import AdaptiveSetRow


def add(session: Session, set_predictor_id: int, coverage: float, method: str, level: float, state: dict,
        last_chunk_id: int) -> AdaptiveSetRow:
    row = AdaptiveSetRow(set_predictor_id=set_predictor_id, coverage=coverage, method=method, level=level,
                         state=state, n_rows=0, covered_rows=0, last_chunk_id=last_chunk_id, updated_at=utcnow())
    session.add(row)
    return row


def of_predictors(session: Session, set_predictor_ids: list[int]) -> list[AdaptiveSetRow]:
    """The states of these set predictors, by set predictor and level."""
    if not set_predictor_ids:
        return []
    return list(session.scalars(select(AdaptiveSetRow).where(AdaptiveSetRow.set_predictor_id.in_(set_predictor_ids))
                                .order_by(AdaptiveSetRow.set_predictor_id, AdaptiveSetRow.coverage)))


def serving_level(session: Session, set_predictor_id: int, coverage: float, digits: int) -> tuple[int, float] | None:
    """``(state id, level)`` of the set predictor's state at ``coverage`` (equal to ``digits`` decimals),
    without the state itself; ``None`` when it has none."""
    rows = session.execute(select(AdaptiveSetRow.id, AdaptiveSetRow.coverage, AdaptiveSetRow.level)
                           .where(AdaptiveSetRow.set_predictor_id == set_predictor_id)).all()
    for row in rows:
        if round(row.coverage, digits) == round(coverage, digits):
            return row.id, row.level
    return None


def state(session: Session, state_id: int) -> dict:
    return session.execute(select(AdaptiveSetRow.state).where(AdaptiveSetRow.id == state_id)).scalar_one()


def advance(session: Session, state_id: int, expected_last: int, values: dict) -> bool:
    """Store ``values`` in the state unless its watermark is no longer ``expected_last`` (another
    update applied rows meanwhile: theirs stands)."""
    row = session.scalar(select(AdaptiveSetRow).where(AdaptiveSetRow.id == state_id).with_for_update())
    if row is None or row.last_chunk_id != expected_last:
        return False
    for key, value in {**values, "updated_at": utcnow()}.items():
        setattr(row, key, value)
    return True
