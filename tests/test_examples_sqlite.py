"""Every example of the README and the docs runs against a live server on SQLite (the runner and its
rules: ``tests/support/examples.py``; the same on Postgres: ``tests/test_examples_postgres.py``, a
file of its own so that another test worker runs it at the same time)."""

from __future__ import annotations

import pytest

from tests.support.examples import FILES, blocks, examples_server, files_with_examples, run_examples


def test_every_block_is_read_and_every_skip_has_a_reason():
    """The parser sees every fenced block of each language (none indented or unclosed), and each
    block left out says why; of the README only the two commands are left out (the runner starts
    its own server and is part of the suite)."""
    for name in FILES:
        for block in blocks(name):
            assert block["reason"] is None or block["reason"].strip(), f"{name}:{block['line']}"
    assert [b["code"] for b in blocks("README.md") if b["reason"]] == ["make serve\n", "make test\n"]
    assert len([b for b in blocks("README.md") if not b["reason"]]) >= 8


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with examples_server("sqlite", tmp_path_factory) as base:
        yield base


@pytest.mark.parametrize("name", files_with_examples())
def test_examples_run(name, server, tmp_path, monkeypatch):
    run_examples(name, server, tmp_path, monkeypatch)
