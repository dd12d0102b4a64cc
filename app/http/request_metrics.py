"""The request metrics of ``/metrics``: ``calibration_requests_total`` (a counter by method, route and
status) and ``calibration_request_seconds`` (a histogram of latency by method and route), counted in
plain Python by ``app.http.middleware`` and made into Prometheus samples when ``/metrics`` is read.
prometheus_client's own ``Counter`` and ``Histogram`` take a lock for every increment and find a
histogram's bucket in a Python loop, a share of a small request's cost (docs/benchmarks.md, "The
request middleware"); the exposition is theirs, ``_created`` series included unless
``PROMETHEUS_DISABLE_CREATED_SERIES`` (or ``prometheus_client.disable_created_metrics``) turns them off.

Counts are written on the event loop; ``collect`` may run on another thread and copies each table
before reading it, so a scrape sees every request counted before it, each series consistent to
within the requests in flight."""

from __future__ import annotations

import time
from bisect import bisect_left

from prometheus_client import CollectorRegistry
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)  # seconds, each "le"


class RequestMetrics:
    """A Prometheus collector of the two request metrics, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry):
        self._counts: dict[tuple[str, str, int], list] = {}  # (method, route, status) -> [count, created]
        # (method, route) -> [counts by bucket (+Inf last), sum, created]
        self._latency: dict[tuple[str, str], list] = {}
        registry.register(self)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        count = self._counts.get((method, route, status))
        if count is None:
            count = self._counts[(method, route, status)] = [0, time.time()]
        count[0] += 1
        latency = self._latency.get((method, route))
        if latency is None:
            latency = self._latency[(method, route)] = [[0] * (len(BUCKETS) + 1), 0.0, time.time()]
        latency[0][bisect_left(BUCKETS, seconds)] += 1  # the first bound >= seconds
        latency[1] += seconds

    def describe(self):
        """The families, empty (as prometheus_client's ``Histogram`` writes its ``_created``: a gauge)."""
        return [CounterMetricFamily("calibration_requests", "HTTP requests", labels=("method", "route", "status")),
                HistogramMetricFamily("calibration_request_seconds", "HTTP request latency",
                                      labels=("method", "route")),
                GaugeMetricFamily("calibration_request_seconds_created", "HTTP request latency",
                                  labels=("method", "route"))]

    def collect(self):
        requests, latency, latency_created = self.describe()
        with_created = prometheus_metrics._use_created  # prometheus_client's own switch, read as its metrics do
        for (method, route, status), (count, created) in list(self._counts.items()):
            requests.add_metric((method, route, str(status)), count, created=created if with_created else None)
        for (method, route), (counts, total, created) in list(self._latency.items()):
            cumulative, buckets = 0, []
            for bound, count in zip((*map(str, BUCKETS), "+Inf"), list(counts), strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            latency.add_metric((method, route), buckets, total)
            if with_created:
                latency_created.add_metric((method, route), created)
        yield requests
        yield latency
        if latency_created.samples:  # as prometheus_client: no _created family without a series
            yield latency_created
