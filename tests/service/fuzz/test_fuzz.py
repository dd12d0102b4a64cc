"""A bounded schemathesis run over the whole OpenAPI schema against a live server: no 5xx and no
response that violates the schema, with API keys off and on.

With keys off every phase runs (examples, coverage, fuzzing, stateful), valid and invalid requests.
With keys on the same handlers answer behind the key check, so that pass runs the examples, the
coverage phase's valid requests (its boundary values reach every operation: ~1000 cases) and the
stateful links, all behind the key check, and leaves out:

- the random fuzzing phase, the costliest to generate (~20 ms a case against ~3 ms) and already
  run on the same handlers with keys off;
- the coverage phase's invalid requests (~2100 of its ~3100 cases, ~12 CPU-s): the key check reads
  only the key's headers, which every request carries, so an invalid body, query or path gets the
  same validation answer behind it as the keys-off pass, which runs them all, checks.

``scripts/fuzz`` runs every phase and both modes, longer, with keys on."""

from __future__ import annotations

import re

import pytest

from app.access import keys
from app.platform.db import Database
from app.platform.migrate import upgrade
from tests.service.support.fuzz import fuzz, seed_calibrator
from tests.service.support.live import live_server


@pytest.fixture(scope="module")
def unicode_tables(tmp_path_factory):
    """Hypothesis's Unicode tables, shared by both passes' schemathesis runs (``fuzz``)."""
    return tmp_path_factory.mktemp("unicode_data")


@pytest.mark.slow
@pytest.mark.parametrize("keys_enabled", [False, True])
def test_fuzzing_the_schema_finds_no_server_error_and_no_schema_violation(sqlite_url, keys_enabled,
                                                                          unicode_tables):
    upgrade(sqlite_url)
    env, headers = {}, None
    if keys_enabled:
        _, key = keys.create_key(Database(sqlite_url), "fuzzer", ["admin"])
        env, headers = {"CALIBRATION_API_KEYS_ENABLED": "true"}, {"X-API-Key": key}
    with live_server(sqlite_url, env=env) as base:
        seed_calibrator(base, headers)
        code, output = fuzz(base, max_examples=8, seed=20261122, headers=headers,
                            phases="examples,coverage,stateful" if keys_enabled else None,
                            mode="positive" if keys_enabled else None, unicode_tables=unicode_tables)
    generated = [int(n) for n in re.findall(r"(\d+) generated", output)]
    assert code == 0 and "Runtime Error" not in output, output[-6000:]
    assert len(generated) == 2 and sum(generated) > 500, output[-3000:]
    # every selected operation was tested, in each pass
    reached = re.findall(r"Selected: (\d+)/\d+\s+Tested: (\d+)", output)
    assert len(reached) == 2 and all(selected == tested for selected, tested in reached), output[-3000:]
