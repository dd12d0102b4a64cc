"""A few seconds of the load test (benchmarks/load_test.py) so that it keeps working: mixed
traffic from wrk against 2 workers on Postgres, without a single error."""

from __future__ import annotations

import os
import shutil

import pytest

from benchmarks.load_test import errors, run


@pytest.mark.slow
@pytest.mark.postgres
def test_mixed_traffic_against_two_workers_gives_no_errors(postgres_url):
    if shutil.which("wrk") is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("wrk is required in CI (.ci/run installs it)")
        pytest.skip("wrk is not installed")
    result = run(postgres_url, seconds=4, clients=8, warmup=1)
    assert errors(result["warmup"]) == 0 and errors(result["measured"]) == 0
    assert result["measured"]["requests"] > 100
    assert len(result["memory"]) == 2  # both workers found and sampled; fits were numbered 1..n (run checks)
