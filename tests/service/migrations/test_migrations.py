"""The Alembic migrations own the schema: up, down, up again, and exactly the models' schema."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect
from starlette.testclient import TestClient

from app.all_rows import Base
from app.main import create_app
from app.platform import revision
from app.platform.db import make_engine
from app.platform.migrate import current_revision, downgrade, head_revision, include_name, upgrade
from app.settings import Settings

TABLES = {"calibrators", "calibrator_versions", "aliases", "jobs", "api_keys", "idempotency_keys",
          "observation_chunks", "prediction_chunks", "logged_predictions", "drift_monitors",
          "calibrator_settings", "alias_gates", "alias_moves", "evaluations", "refit_policies", "prediction_epochs",
          "webhook_deliveries", "set_predictors", "adaptive_sets", "registry_generation"}
PROCRASTINATE_TABLES = {"procrastinate_jobs", "procrastinate_events", "procrastinate_periodic_defers",
                        "procrastinate_workers"}  # the job engine's, on Postgres only


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade(empty_url):
    upgrade(empty_url)
    assert _tables(empty_url) == TABLES | (PROCRASTINATE_TABLES if empty_url.startswith("postgresql") else set())
    downgrade(empty_url, "base")
    assert _tables(empty_url) == set()
    upgrade(empty_url)
    engine = make_engine(empty_url)
    assert current_revision(engine) == head_revision()
    engine.dispose()


def test_the_revisions_readiness_compares_are_alembic_s(empty_url):
    """``app.platform.revision`` (read without Alembic): ``HEAD`` is the head of the migration scripts,
    and ``current_revision`` reads what Alembic reads, on a database never migrated, part way and at head."""
    assert head_revision() == revision.HEAD
    engine = make_engine(empty_url)
    try:
        for target in (None, "0014", "head"):
            if target is not None:
                upgrade(empty_url, target)
            with engine.connect() as connection:
                alembic_reads = MigrationContext.configure(connection).get_current_revision()
            assert revision.current_revision(engine) == alembic_reads == {None: None, "0014": "0014",
                                                                          "head": revision.HEAD}[target]
    finally:
        engine.dispose()


def test_migrations_create_exactly_the_models_schema(empty_url):
    upgrade(empty_url)
    engine = make_engine(empty_url)
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"include_name": include_name})
        differences = compare_metadata(context, Base.metadata)
    engine.dispose()
    assert differences == []


def test_the_app_never_creates_tables_and_readiness_says_why(empty_url):
    app = create_app(Settings(database_url=empty_url))
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        ready = client.get("/readyz")
        assert ready.status_code == 503 and "calibration-service migrate" in ready.json()["schema"]
        response = client.get("/v1/calibrators")
        assert response.status_code == 503 and "migrate" in response.json()["detail"]
    assert _tables(empty_url) == set()


def test_0015_counts_each_calibrator_s_logged_rows_and_its_downgrade_drops_the_counts(empty_url):
    """Up from 0014 with logged chunks: ``logged_rows`` is each calibrator's sum of chunk rows (0
    without any) and ``log_dropped_rows`` 0; down to 0014 drops both columns and keeps every row."""
    from sqlalchemy import text
    upgrade(empty_url, "0014")
    engine = make_engine(empty_url)
    try:
        with engine.begin() as connection:
            for cid, name in ((1, "a"), (2, "b")):
                connection.execute(text("INSERT INTO calibrators (id, name, last_version, created_at, log_sample_rate) "
                                        "VALUES (:id, :name, 0, CURRENT_TIMESTAMP, 1)"), {"id": cid, "name": name})
            for n in (5, 7):
                connection.execute(text(
                    "INSERT INTO prediction_chunks (calibrator_id, version, input_kind, n_rows, n_classes, dtype, "
                    "inputs, created_at) VALUES (1, 1, 'scores', :n, 2, '<f8', :data, CURRENT_TIMESTAMP)"),
                    {"n": n, "data": bytes(8 * n)})
        upgrade(empty_url, "0015")
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT name, logged_rows, log_dropped_rows FROM calibrators "
                                           "ORDER BY name")).all()
        assert [tuple(row) for row in rows] == [("a", 12, 0), ("b", 0, 0)]
        downgrade(empty_url, "0014")
        columns = {column["name"] for column in inspect(engine).get_columns("calibrators")}
        assert "logged_rows" not in columns and "log_dropped_rows" not in columns
        with engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM prediction_chunks")).scalar_one() == 2
            assert connection.execute(text("SELECT count(*) FROM calibrators")).scalar_one() == 2
    finally:
        engine.dispose()


def test_0019_drops_the_id_index_s_key_to_calibrators_keeps_every_row_and_deletes_them_with_their_calibrator(
        empty_url):
    """Up from 0018 with logged ids: the same rows, no foreign key to ``calibrators`` (the one to the
    chunk stays; on SQLite still a ``WITHOUT ROWID`` table with its chunk index), and deleting a
    calibrator still deletes its ids, through its chunks; down to 0018: the same rows, the key back."""
    from sqlalchemy import text
    upgrade(empty_url, "0018")
    engine = make_engine(empty_url)
    ids = sorted(f"id-{i}" for i in range(300))

    def rows() -> list[tuple]:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(
                "SELECT calibrator_id, epoch_id, prediction_id, chunk_id, row, labelled, n_rows, kept "
                "FROM logged_predictions ORDER BY calibrator_id, epoch_id, prediction_id"))]

    def keys() -> set[str]:
        return {key["referred_table"] for key in inspect(engine).get_foreign_keys("logged_predictions")}
    try:
        with engine.begin() as connection:
            for cid in (1, 2):
                connection.execute(text("INSERT INTO calibrators (id, name, last_version, created_at, log_sample_rate) "
                                        "VALUES (:id, :name, 1, CURRENT_TIMESTAMP, 1)"), {"id": cid, "name": f"c{cid}"})
                connection.execute(text(
                    "INSERT INTO prediction_epochs (id, calibrator_id, n_ids, created_at, written_at) "
                    "VALUES (:id, :id, 0, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"), {"id": cid})
                connection.execute(text(
                    "INSERT INTO prediction_chunks (id, calibrator_id, version, input_kind, n_rows, n_classes, dtype, "
                    "inputs, created_at) VALUES (:id, :id, 1, 'logits', 300, 2, '<f8', :data, CURRENT_TIMESTAMP)"),
                    {"id": cid, "data": bytes(16 * 300)})
                connection.execute(text(
                    "INSERT INTO logged_predictions (calibrator_id, epoch_id, prediction_id, chunk_id, row, labelled, "
                    "n_rows, kept) VALUES (:c, :c, :p, :c, :r, :l, 1, :k)"),
                    [{"c": cid, "p": pid, "r": i, "l": i % 3 == 0, "k": b"\x01\x00\x00\x00" if i == 7 else None}
                     for i, pid in enumerate(ids)])
        before = rows()
        assert len(before) == 600 and keys() == {"calibrators", "prediction_chunks"}
        upgrade(empty_url)
        assert rows() == before and keys() == {"prediction_chunks"}
        indexes = inspect(engine).get_indexes("logged_predictions")
        assert "ix_logged_predictions_chunk_id" in {index["name"] for index in indexes}
        if engine.dialect.name == "sqlite":
            with engine.connect() as connection:
                created = connection.execute(text("SELECT sql FROM sqlite_master WHERE name = 'logged_predictions'"))
                assert "WITHOUT ROWID" in created.scalar_one()
        downgrade(empty_url, "0018")
        assert rows() == before and keys() == {"calibrators", "prediction_chunks"}
        upgrade(empty_url)
        with engine.begin() as connection:
            if engine.dialect.name == "sqlite":
                connection.execute(text("PRAGMA foreign_keys=ON"))
            connection.execute(text("DELETE FROM calibrators WHERE id = 1"))
        assert rows() == [row for row in before if row[0] == 2]
    finally:
        engine.dispose()
