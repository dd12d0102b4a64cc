"""The Alembic migrations own the schema: up, down, up again, and exactly the models' schema."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect
from starlette.testclient import TestClient

from app.db import make_engine
from app.main import create_app
from app.migrate import current_revision, downgrade, head_revision, include_name, upgrade
from app.models import Base
from app.settings import Settings

TABLES = {"calibrators", "calibrator_versions", "aliases", "jobs", "api_keys", "idempotency_keys",
          "observation_chunks", "prediction_chunks", "logged_predictions", "drift_monitors",
          "calibrator_settings", "alias_gates", "alias_moves", "evaluations", "refit_policies", "prediction_epochs",
          "webhook_deliveries"}
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
