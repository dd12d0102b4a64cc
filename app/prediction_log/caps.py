"""The prediction log's per-name cap (``CALIBRATION_MAX_LOGGED_ROWS``) in ``/metrics``: each
calibrator's log counts its rows and the rows it did not take for being full (migration 0015,
kept by the writer, ``app.prediction_log.buffer``, and by retention); ``LogCapCollector`` reads
them when ``/metrics`` is scraped, so that every replica reports the same counts.
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily

from ..platform.db import Database
from . import store as prediction_log_store


class LogCapCollector:
    """``calibration_log_dropped_rows_total`` per calibrator whose full log dropped rows."""

    def __init__(self, db: Database):
        self.db = db

    def collect(self):
        try:
            with self.db.read() as session:
                rows = prediction_log_store.every_dropped(session)
        except Exception:  # the database is away or unmigrated: /readyz says so
            return
        dropped = CounterMetricFamily("calibration_log_dropped_rows", "Rows a calibrator's prediction log did not "
                                      "take because it held CALIBRATION_MAX_LOGGED_ROWS", labels=["calibrator"])
        for name, value in rows:
            dropped.add_metric([name], value)
        yield dropped
