"""``calibration-service migrate --downgrade R`` on a database holding data: refused (exit code 2)
with what would be lost, unless ``--yes``; a downgrade that loses nothing just runs. Through the
CLI's own ``main`` on a real SQLite file."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import inspect, text
from starlette.testclient import TestClient

from app import cli
from app.access import keys
from app.main import create_app
from app.platform.db import Database, make_engine
from app.platform.migrate import current_revision, head_revision, upgrade
from app.registry.schemas import EXAMPLE_LABELS, EXAMPLE_LOGITS
from app.settings import Settings, get_settings

FIT = {"method": "temperature", "logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS}


@pytest.fixture(autouse=True)
def plain_logging():
    """No log handlers while the command runs (as when an operator runs it: the app's JSON
    handler, which other tests may have left writing to a closed stream, is set aside)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers, root.level = [], logging.WARNING
    yield
    root.handlers, root.level = handlers, level


@pytest.fixture
def database(sqlite_url, monkeypatch):
    """A SQLite file at head that ``calibration-service`` reads from DATABASE_URL."""
    upgrade(sqlite_url)
    monkeypatch.setenv("DATABASE_URL", sqlite_url)
    get_settings.cache_clear()
    yield sqlite_url
    get_settings.cache_clear()


def _fill(url: str, alias: bool = True) -> None:
    """2 calibrators with 3 versions and 1 alias between them (its move recorded)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    with TestClient(create_app(Settings(database_url=url))) as client:
        for name in ("a", "a", "b"):
            assert client.post(f"/v1/calibrators/{name}/versions", json=FIT).status_code == 201
        if alias:
            assert client.put("/v1/calibrators/a/aliases/production", json={"version": 2}).status_code == 200
    root.handlers, root.level = handlers, level  # the app configured its JSON logs


def _said(capsys) -> str:
    """What the command wrote to stderr (not the JSON logs of the app that filled the database)."""
    return "".join(line for line in capsys.readouterr().err.splitlines(keepends=True)
                   if not line.startswith('{"ts"'))


def _state(url: str) -> tuple[str | None, dict[str, int]]:
    engine = make_engine(url)
    try:
        tables = set(inspect(engine).get_table_names()) - {"alembic_version"}
        with engine.connect() as connection:
            counts = {t: connection.execute(text(f'SELECT count(*) FROM "{t}"')).scalar() for t in sorted(tables)}
        return current_revision(engine), counts
    finally:
        engine.dispose()


def test_a_downgrade_that_would_lose_data_asks_for_yes(database, capsys):
    _fill(database)
    keys.create_key(Database(database), "ops", ["admin"])
    before = _state(database)
    assert cli.main(["migrate", "--downgrade", "base"]) == 2
    assert _said(capsys) == (
        "error: downgrading to base drops or changes tables that hold 2 calibrators, 3 versions, 1 alias, "
        "1 API key, 1 recorded alias move (calibrators, calibrator_versions, aliases, api_keys, alias_moves); "
        "their data would be lost. Run again with --yes to proceed.\n")
    assert _state(database) == before  # nothing happened
    assert cli.main(["migrate", "--downgrade", "base", "--yes"]) == 0
    assert _said(capsys) == ("downgrading to base: dropping or changing 2 calibrators, 3 versions, "
                             "1 alias, 1 API key, 1 recorded alias move\n")
    assert _state(database) == (None, {})


def test_only_the_tables_the_downgrade_touches_count(database, capsys):
    _fill(database)
    keys.create_key(Database(database), "ops", ["read"])
    # 0003 made api_keys, 0006 a column of calibrators (its logging rate), 0008 alias_moves: the versions stay
    assert cli.main(["migrate", "--downgrade", "0002"]) == 2
    assert _said(capsys) == (
        "error: downgrading to 0002 drops or changes tables that hold 2 calibrators, 1 API key, 1 recorded alias "
        "move (calibrators, api_keys, alias_moves); their data would be lost. Run again with --yes to proceed.\n")
    assert cli.main(["migrate", "--downgrade", "0002", "--yes"]) == 0
    revision, counts = _state(database)
    assert revision == "0002" and "api_keys" not in counts
    assert (counts["calibrators"], counts["calibrator_versions"], counts["aliases"]) == (2, 3, 1)


def test_a_downgrade_that_loses_nothing_runs_without_yes(database, capsys):
    _fill(database, alias=False)  # calibrators, but no alias moves, evaluations or policies (0008's tables)
    assert cli.main(["migrate", "--downgrade", "0007"]) == 0
    assert _said(capsys) == ""
    assert _state(database)[0] == "0007"
    assert cli.main(["migrate"]) == 0
    assert _state(database)[0] == head_revision()


def test_an_empty_database_downgrades_to_base_without_yes(database):
    assert cli.main(["migrate", "--downgrade", "base"]) == 0
    assert _state(database) == (None, {})


def test_an_unknown_revision_is_an_error_not_a_traceback(database, capsys):
    assert cli.main(["migrate", "--downgrade", "zzz"]) == 2
    said = _said(capsys)
    assert said.startswith("error: ") and "'zzz'" in said and "Traceback" not in said
    assert _state(database)[0] == head_revision()


def test_the_help_names_the_option(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["migrate", "--help"])
    assert exited.value.code == 0
    assert "--yes" in capsys.readouterr().out
