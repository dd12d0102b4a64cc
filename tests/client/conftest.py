"""Live servers for the client and CLI tests: ``calibration-service serve`` in a subprocess (one
per module) on a SQLite file or a fresh Postgres database, API keys on, a 1 MiB body limit, and
real model outputs (a few hundred CIFAR-10 ResNet-50 validation rows)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import numpy as np
import pytest

from app.access.keys import create_key
from app.platform.db import Database
from app.platform.migrate import upgrade
from calibration_client import Client
from tests.helpers import DATA
from tests.service.support.databases import create_postgres_database
from tests.service.support.live import live_server

# rich sizes the command line's consoles once, from COLUMNS, when calibration_client.cli is imported:
# without a terminal that is 80 columns (or whatever the environment says), and tables and paths
# would be cut or wrapped; the CLI tests read them whole
os.environ["COLUMNS"] = "200"

ROWS = 400
MAX_BODY_BYTES = 1024 * 1024


@dataclass
class Service:
    """A running server: its base URL and one API key per scope."""

    url: str
    keys: dict[str, str]


@pytest.fixture(scope="session")
def cifar() -> tuple[np.ndarray, np.ndarray]:
    """The first ROWS validation logits (float32, 10 classes) and labels of a real model."""
    with np.load(DATA / "cifar10_resnet50_cross_entropy_val.npz") as data:
        return data["logits"][:ROWS], data["labels"][:ROWS]


@contextmanager
def database(kind: str, tmp_path_factory):
    """An empty database of ``kind`` (created, not migrated), dropped afterwards."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('client') / 'calibration.db'}"
        return
    url, drop = create_postgres_database()
    try:
        yield url
    finally:
        drop()


def _admin_key(url: str) -> str:
    """The first admin key, made in process on the migrated database, as ``calibration-service
    keys create`` makes it (that command and ``migrate`` have their own tests:
    tests/service/live/test_access.py, tests/service/migrations/test_migrate_cli.py)."""
    upgrade(url)
    database = Database(url)
    try:
        _, key = create_key(database, "client-tests", ["admin"])
    finally:
        database.dispose()
    return key


@contextmanager
def keyed_server(url: str, log_file, env: dict | None = None):
    """A live server with API keys on and a read-only and an admin key."""
    admin = _admin_key(url)
    # jobs run in the server's own pool on both databases (tests/service/live/test_jobs.py runs workers)
    settings = {"CALIBRATION_API_KEYS_ENABLED": "true", "CALIBRATION_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
                "CALIBRATION_JOB_ENGINE": "embedded", **(env or {})}
    with live_server(url, env=settings, log_file=log_file) as base:
        made = httpx.post(f"{base}/v1/keys", json={"name": "reader", "scopes": ["read"]},
                          headers={"X-API-Key": admin}, timeout=30)
        assert made.status_code == 201, made.text
        yield Service(base, {"admin": admin, "read": made.json()["key"]})


# a live server with keys per test module (both databases), and an admin client of it; a module
# that needs other settings defines its own `service`
@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def service(request, tmp_path_factory):
    with database(request.param, tmp_path_factory) as url, \
            keyed_server(url, tmp_path_factory.mktemp("log") / "server.log") as running:
        yield running


@pytest.fixture
def client(service):
    with Client(service.url, api_key=service.keys["admin"], retries=0) as client:
        yield client
