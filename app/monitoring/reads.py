"""What the other domains (the dashboard) read of the drift monitors, each call in a transaction of
its own: a calibrator's labelled monitors with the feedback chunks each was fed (in arrival order, up
to its last chunk), and the facts of every observation chunk of a calibrator (``ChunkFacts``, for
placing an alarm in a quality window). The monitors' store and rows stay the monitoring's own."""

from __future__ import annotations

from ..observations import reads as observations
from ..observations.chunks import ChunkFacts
from ..platform.db import Database
from ..registry import reads as registry
from . import store as alarm_store
from .rows import DriftMonitorRow


def labelled_monitors(db: Database, name: str) -> list[tuple[DriftMonitorRow, list[ChunkFacts]]]:
    """Each labelled monitor of ``name`` with the chunks of its version's labelled predictions that it
    was fed (ids up to its ``last_chunk_id``), in arrival order; ``NotFound`` without calibrator ``name``."""
    with db.read() as session:
        calibrator_id = registry.calibrator_id(session, name)
        monitors = [m for m in alarm_store.monitors(session, calibrator_id) if m.signal == "labelled"]
        return [(m, [c for c in observations.observation_chunks(session, calibrator_id, "feedback", m.version)
                     if c.id <= m.last_chunk_id]) for m in monitors]


def observation_chunks(db: Database, name: str) -> list[ChunkFacts]:
    """The facts (id, source, version, created_at, rows, ...) of every observation chunk of ``name``,
    in arrival order; ``NotFound`` without calibrator ``name``."""
    with db.read() as session:
        return observations.observation_chunks(session, registry.calibrator_id(session, name))
