"""Prometheus series of the jobs, read from the ``jobs`` table when ``/metrics`` is scraped (the
table is shared by every API process and worker, so each replica reports the same figures):

* ``calibration_jobs{state}`` — jobs by state (``queued`` is the queue depth);
* ``calibration_job_seconds{kind, state}`` — a summary (count and sum) of the run time of the
  finished jobs still kept (``job_store.RETENTION``), by kind.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric, SummaryMetricFamily

from ..platform.db import Database
from . import store as job_store


class JobCollector:
    def __init__(self, db: Database):
        self.db = db

    def collect(self) -> Iterator[Metric]:
        try:
            with self.db.read() as session:
                counts = job_store.counts_by_state(session)
                durations = job_store.finished_durations(session)
        except Exception:  # the database is away or unmigrated: /readyz says so; no job series
            return
        states = GaugeMetricFamily("calibration_jobs", "Jobs by state (queued is the queue depth)", labels=["state"])
        for state, count in counts.items():
            states.add_metric([state], count)
        yield states
        totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
        for kind, status, seconds in durations:
            totals[kind, status][0] += 1
            totals[kind, status][1] += seconds
        summary = SummaryMetricFamily("calibration_job_seconds", "Run time of finished jobs (kept for a day)",
                                      labels=["kind", "state"])
        for (kind, status), (finished, total) in sorted(totals.items()):
            summary.add_metric([kind, status], count_value=int(finished), sum_value=total)
        yield summary
