"""Every example of the README and the docs runs against a live server on Postgres with a job worker
beside it (the runner and its rules: ``tests/support/examples.py``; the same on SQLite:
``tests/test_examples_sqlite.py``, a file of its own so that another test worker runs it at the same
time)."""

from __future__ import annotations

import pytest

from tests.support.examples import examples_server, files_with_examples, run_examples

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with examples_server("postgres", tmp_path_factory) as base:
        yield base


@pytest.mark.parametrize("name", files_with_examples())
def test_examples_run(name, server, tmp_path, monkeypatch):
    run_examples(name, server, tmp_path, monkeypatch)
