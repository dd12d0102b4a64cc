"""What the other domains (the observations' labels and summaries) read of the prediction log inside
their own transaction: a calibrator's logged predictions and how many have their label, the rows it
holds and dropped for being full, and the inputs of chosen rows of logged chunks. Each call takes the
caller's session; the log's store and rows stay its own (finding and claiming ids:
``app.prediction_log.lookup``)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from . import store


def logged_counts(session: Session, calibrator_id: int) -> tuple[int, int]:
    """Logged predictions of a calibrator, and how many of them have their label."""
    return store.logged_counts(session, calibrator_id)


def log_state(session: Session, calibrator_id: int) -> tuple[int, int]:
    """The calibrator's logged rows and the rows its full log dropped."""
    return store.log_state(session, calibrator_id)


def prediction_rows(session: Session, wanted: dict[int, set[int]]) -> dict[int, tuple]:
    """``{chunk_id: (version, kind, n_classes, {row: inputs})}`` of the rows ``wanted`` of logged
    chunks (``{chunk_id: rows}``), each run of consecutive rows cut from its chunk in the database."""
    return store.prediction_rows(session, wanted)
