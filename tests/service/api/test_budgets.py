"""The calibrator cache in bytes: ``CALIBRATION_CACHE_BYTES`` bounds the total stored size (the
length of ``params_json``) of the calibrators a process keeps, least recently used out first,
besides the ``CALIBRATION_CACHE_SIZE`` cap on entries."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from starlette.testclient import TestClient

from app.main import create_app
from app.settings import Settings, get_settings
from tests.helpers import make_reference_input

LOGITS, LABELS = make_reference_input(n=2000, k=3, seed=3)


@pytest.fixture
def app_with(database_url, monkeypatch):
    """An app started with the given CALIBRATION_* environment (as ``serve`` starts one)."""
    clients = []

    def start(**environment) -> TestClient:
        for key, value in environment.items():
            monkeypatch.setenv(f"CALIBRATION_{key.upper()}", str(value))
        get_settings.cache_clear()
        client = TestClient(create_app(Settings(database_url=database_url)))
        clients.append(client.__enter__())
        return client

    yield start
    for client in clients:
        client.__exit__(None, None, None)
    get_settings.cache_clear()


def _fit(client: TestClient, name: str, n_bins: int) -> None:
    body = {"method": "histogram_binning", "options": {"n_bins": n_bins, "strategy": "uniform"},
            "logits": LOGITS.tolist(), "labels": LABELS.tolist()}
    response = client.post(f"/v1/calibrators/{name}/versions", json=body)
    assert response.status_code == 201, response.text


def _stored_bytes(client: TestClient) -> dict[str, int]:
    with client.app.state.db.read() as session:
        rows = session.execute(text("SELECT c.name, length(v.params_json) FROM calibrator_versions v "
                                    "JOIN calibrators c ON c.id = v.calibrator_id"))
        return dict(rows.all())


def _cached(client: TestClient) -> list[str]:
    """Names in the cache, least recently used first."""
    return [key[0] for key in client.app.state.service.cache._items]


def test_the_default_budget_is_256_mib():
    assert Settings().cache_bytes == 256 * 1024 * 1024
    assert Settings(cache_bytes=1000).cache_bytes == 1000


def test_large_fits_are_kept_only_while_they_fit_the_byte_budget(app_with):
    client = app_with(cache_bytes=700_000)
    cache = client.app.state.service.cache
    assert cache.max_bytes == 700_000 and cache.size == 256
    for name in ("h1", "h2", "h3"):
        _fit(client, name, n_bins=5000)
    sizes = _stored_bytes(client)
    assert all(300_000 < size < 350_000 for size in sizes.values()), sizes  # two fit, three do not
    assert _cached(client) == ["h2", "h3"]
    assert cache.total_bytes == sizes["h2"] + sizes["h3"] <= 700_000
    # serving the evicted one loads it (sized from its stored row) and evicts the least recently used
    assert client.post("/v1/calibrators/h1/calibrate", json={"logits": LOGITS[:2].tolist()}).status_code == 200
    assert _cached(client) == ["h3", "h1"]
    assert cache.total_bytes == sizes["h3"] + sizes["h1"]
    # a hit moves an entry to the back
    assert client.post("/v1/calibrators/h3/calibrate", json={"logits": LOGITS[:2].tolist()}).status_code == 200
    assert _cached(client) == ["h1", "h3"]


def test_a_version_beyond_the_whole_budget_is_served_but_not_kept(app_with):
    client = app_with(cache_bytes=200_000)
    _fit(client, "small", n_bins=15)
    _fit(client, "huge", n_bins=5000)
    assert _cached(client) == ["small"]
    served = client.post("/v1/calibrators/huge/calibrate", json={"logits": LOGITS[:2].tolist()})
    assert served.status_code == 200 and served.json()["version"] == 1
    assert _cached(client) == ["small"]
    assert client.app.state.service.cache.total_bytes == _stored_bytes(client)["small"]


def test_the_entry_cap_still_holds(app_with):
    client = app_with(cache_bytes=10**9, cache_size=2)
    for name in ("a", "b", "c"):
        _fit(client, name, n_bins=15)
    assert _cached(client) == ["b", "c"]
    sizes = _stored_bytes(client)
    assert client.app.state.service.cache.total_bytes == sizes["b"] + sizes["c"]
