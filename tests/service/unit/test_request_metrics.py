"""``app.http.request_metrics.RequestMetrics`` exposes what prometheus_client's own ``Counter`` and
``Histogram`` expose for the same requests, bucket boundaries included; the ``_created`` series alike
but for their times."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    enable_created_metrics,
    generate_latest,
)

from app.http.request_metrics import BUCKETS, RequestMetrics

REQUEST = st.tuples(st.sampled_from(["GET", "POST"]), st.sampled_from(["/v1/methods", "/v2/models/{name}/infer"]),
                    st.sampled_from([200, 404, 500]),
                    st.one_of(st.sampled_from(BUCKETS), st.floats(0, 20, allow_nan=False)))


def _samples(registry: CollectorRegistry) -> list[str]:
    """The exposition's lines, a ``_created`` sample's time left out."""
    return [line.rsplit(" ", 1)[0] if line.split("{")[0].endswith("_created") else line
            for line in generate_latest(registry).decode().splitlines()]


@settings(max_examples=60, deadline=None)
@given(requests=st.lists(REQUEST, max_size=40))
def test_the_samples_are_those_of_prometheus_clients_counter_and_histogram(requests):
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    metrics = RequestMetrics(ours)
    counter = Counter("calibration_requests_total", "HTTP requests", ["method", "route", "status"], registry=theirs)
    histogram = Histogram("calibration_request_seconds", "HTTP request latency", ["method", "route"],
                          registry=theirs, buckets=BUCKETS)
    for method, route, status, seconds in requests:
        metrics.observe(method, route, status, seconds)
        counter.labels(method, route, str(status)).inc()
        histogram.labels(method, route).observe(seconds)
    assert _samples(ours) == _samples(theirs)
    created = [line for line in generate_latest(ours).decode().splitlines()
               if line.startswith("calibration_requests_created")]
    assert len(created) == len({(m, r, s) for m, r, s, _ in requests})


def test_the_created_series_follow_prometheus_clients_switch():
    registry = CollectorRegistry()
    RequestMetrics(registry).observe("GET", "/v1/methods", 200, 0.003)
    disable_created_metrics()
    try:
        assert "_created" not in generate_latest(registry).decode()
    finally:
        enable_created_metrics()
    assert "calibration_requests_created" in generate_latest(registry).decode()
