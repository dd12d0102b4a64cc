"""API keys with scopes: every endpoint answers 401 without a key, 403 without its scope and
serves with it; keys are stored as hashes, revocable, created by the CLI and never logged."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import httpx
import pytest
from sqlalchemy import text
from starlette.testclient import TestClient

from app.access import keys
from app.main import create_app
from app.registry.schemas import EXAMPLE_LABELS, EXAMPLE_LOGITS
from app.settings import Settings
from tests.helpers import REPO
from tests.service.support.live import live_server

# one client for this module's plain calls, keeping no connection between them (a fresh connection
# each, as ``httpx.get`` and co make): those build a client and its SSL context (a CA bundle read, ~35 ms
# of CPU) every call
HTTP = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))

FIT = {"method": "temperature", "logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS}
BATCH = {"logits": EXAMPLE_LOGITS}
LABELLED = {"logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS}
INFER = {"inputs": [{"name": "logits", "shape": [1, 3], "datatype": "FP64", "data": [1.0, 2.0, 3.0]}]}

# (method, path, body, scope needed, status when allowed); run in this order on one database
ENDPOINTS = [
    ("post", "/v1/calibrators/demo/versions", FIT, "write", 201),
    ("post", "/v1/calibrators/demo/versions", FIT, "write", 201),
    ("get", "/v1/calibrators", None, "read", 200),
    ("get", "/v1/calibrators/demo", None, "read", 200),
    ("get", "/v1/calibrators/demo/versions", None, "read", 200),
    ("get", "/v1/calibrators/demo/versions/1", None, "read", 200),
    ("put", "/v1/calibrators/demo/aliases/production", {"version": 1}, "write", 200),
    ("post", "/v1/calibrators/demo/calibrate", BATCH, "read", 200),
    ("post", "/v1/calibrators/demo@production/calibrate", BATCH, "read", 200),
    ("post", "/v1/calibrators/demo/versions/1/calibrate", BATCH, "read", 200),
    ("post", "/v1/calibrators/demo/report", LABELLED, "read", 200),
    ("post", "/v1/calibrators/demo/versions/1/report", LABELLED, "read", 200),
    ("post", "/v1/metrics", {"probabilities": [[0.2, 0.8], [0.6, 0.4]], "labels": [1, 0]}, "read", 200),
    ("get", "/v1/methods", None, "read", 200),
    ("post", "/v1/compare", {**LABELLED, "methods": ["temperature"], "folds": 2}, "read", 200),
    ("get", "/v1/jobs/0123456789abcdef", None, "read", 404),
    ("get", "/v2/models/demo", None, "read", 200),
    ("get", "/v2/models/demo/versions/1", None, "read", 200),
    ("get", "/v2/models/demo/ready", None, "read", 200),
    ("get", "/v2/models/demo/versions/1/ready", None, "read", 200),
    ("post", "/v2/models/demo/infer", INFER, "read", 200),
    ("post", "/v2/models/demo/versions/1/infer", INFER, "read", 200),
    ("post", "/v1/calibrators/demo/observations", LABELLED, "write", 201),
    ("get", "/v1/calibrators/demo/observations", None, "read", 200),
    ("put", "/v1/calibrators/demo/logging", {"sample_rate": 0.5}, "write", 200),
    ("get", "/v1/calibrators/demo/logging", None, "read", 200),
    ("post", "/v1/calibrators/demo/labels", {"ids": ["x"], "labels": [0]}, "write", 200),
    ("delete", "/v1/calibrators/demo/observations?before=2000-01-01T00:00:00Z", None, "admin", 200),
    ("delete", "/v1/calibrators/demo/aliases/production", None, "write", 204),
    ("get", "/v1/keys", None, "admin", 200),
    ("post", "/v1/keys", {"name": "made over http", "scopes": ["read"]}, "admin", 201),
    ("delete", "/v1/keys/0123456789ab", None, "admin", 404),
    ("delete", "/v1/calibrators/demo/versions/2", None, "admin", 204),
    ("delete", "/v1/calibrators/demo", None, "admin", 204),
]
OPEN = ["/healthz", "/readyz", "/metrics", "/docs", "/openapi.json", "/v2", "/v2/health/live", "/v2/health/ready"]
SCOPES = {"read": ["read"], "write": ["write"], "admin": ["admin"]}


@pytest.fixture
def secured(database_url):
    app = create_app(Settings(database_url=database_url, api_keys_enabled=True, api_key_cache_seconds=0))
    issued = {scope: keys.create_key(app.state.db, f"{scope} key", scopes)[1] for scope, scopes in SCOPES.items()}
    with TestClient(app) as client:
        yield client, issued


def _call(client, method, path, body, key=None, header="x-api-key"):
    headers = {}
    if key is not None:
        headers[header] = key if header == "x-api-key" else f"Bearer {key}"
    return client.request(method.upper(), path, json=body, headers=headers)


def _error(response) -> str:
    payload = response.json()
    return payload["error"] if response.request.url.path.startswith("/v2") else payload["detail"]


def test_every_endpoint_needs_a_key_with_its_scope(secured):
    client, issued = secured
    allowed = {"read": {"read", "write", "admin"}, "write": {"write", "admin"}, "admin": {"admin"}}
    forged = issued["admin"][:-4] + "AAAA"
    for method, path, body, scope, status in ENDPOINTS:
        where = f"{method.upper()} {path}"
        missing = _call(client, method, path, body)
        assert missing.status_code == 401, where
        assert "API key is required" in _error(missing) and missing.headers["www-authenticate"].startswith("Bearer")
        assert _call(client, method, path, body, "cal_not-a-key").status_code == 401, where
        wrong = _call(client, method, path, body, forged)
        assert wrong.status_code == 401 and "unknown or revoked" in _error(wrong), where
        for holder in ("read", "write", "admin"):
            if holder not in allowed[scope]:
                refused = _call(client, method, path, body, issued[holder])
                assert refused.status_code == 403, where
                assert _error(refused) == f"this API key lacks the '{scope}' scope"
        # the lowest scope that suffices, once as X-API-Key and (for reads) once as a bearer token
        response = _call(client, method, path, body, issued[scope])
        assert response.status_code == status, f"{where}: {response.text}"
        if method == "get" and status == 200:
            assert _call(client, method, path, body, issued[scope], header="authorization").status_code == 200
    for path in OPEN:
        assert client.get(path).status_code == 200, path


def test_keys_are_hashed_listed_without_secrets_and_revocable(secured):
    client, issued = secured
    admin = {"x-api-key": issued["admin"]}
    created = client.post("/v1/keys", json={"name": "ci reader", "scopes": ["read"]}, headers=admin)
    assert created.status_code == 201
    new = created.json()
    assert new["scopes"] == ["read"] and new["key"].startswith(f"cal_{new['id']}_")
    with client.app.state.db.read() as session:
        rows = session.execute(text("SELECT id, secret_sha256 FROM api_keys")).all()
        dump = repr(session.execute(text("SELECT * FROM api_keys")).all())
    assert dict(rows)[new["id"]] == hashlib.sha256(new["key"].encode()).hexdigest()
    for key in [*issued.values(), new["key"]]:
        assert key not in dump and key.split("_", 2)[2] not in dump
    listed = client.get("/v1/keys", headers=admin).json()["keys"]
    assert {k["id"] for k in listed} >= {new["id"]} and all("key" not in k for k in listed)
    reader = {"x-api-key": new["key"]}
    assert client.get("/v1/calibrators", headers=reader).status_code == 200
    assert client.delete(f"/v1/keys/{new['id']}", headers=admin).status_code == 204
    revoked = client.get("/v1/calibrators", headers=reader)
    assert revoked.status_code == 401 and "unknown or revoked" in revoked.json()["detail"]
    assert client.delete(f"/v1/keys/{new['id']}", headers=admin).status_code == 404
    bad = client.post("/v1/keys", json={"name": "x", "scopes": ["root"]}, headers=admin)
    assert bad.status_code == 422 and "scopes" in bad.json()["detail"]


def test_a_revocation_reaches_a_caching_process_within_the_cache_time(sqlite_url):
    from app.platform.migrate import upgrade

    upgrade(sqlite_url)
    app = create_app(Settings(database_url=sqlite_url, api_keys_enabled=True, api_key_cache_seconds=0.5))
    info, key = keys.create_key(app.state.db, "cached", ["read"])
    with TestClient(app) as client:
        assert client.get("/v1/methods", headers={"x-api-key": key}).status_code == 200
        keys.revoke_key(app.state.db, info.id)  # as another replica or the CLI would
        import time

        deadline = time.monotonic() + 0.5
        while client.get("/v1/methods", headers={"x-api-key": key}).status_code == 200:
            assert time.monotonic() < deadline + 0.2, "the revoked key is still accepted after the cache time"
            time.sleep(0.05)
        assert client.get("/v1/methods", headers={"x-api-key": key}).status_code == 401


def test_docs_show_the_security_scheme():
    schema = create_app(Settings(database_url="sqlite://")).openapi()
    schemes = schema["components"]["securitySchemes"]
    assert schemes["ApiKey"] == {**schemes["ApiKey"], "type": "apiKey", "in": "header", "name": "X-API-Key"}
    assert schemes["Bearer"]["scheme"] == "bearer"
    for method, path, _body, _scope, _status in ENDPOINTS:
        template = next(p for p in schema["paths"] if _matches(p, path))
        operation = schema["paths"][template][method]
        assert operation["security"] == [{"ApiKey": []}, {"Bearer": []}], path
        assert {"401", "403"} <= set(operation["responses"]), path
    assert "security" not in schema["paths"]["/healthz"]["get"]


def _matches(template: str, path: str) -> bool:
    parts, actual = template.split("/"), path.split("?")[0].split("/")
    return len(parts) == len(actual) and all(p == a or p.startswith("{") for p, a in zip(parts, actual, strict=True))


def _cli(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=REPO, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "DATABASE_URL": url}, timeout=60)


def test_cli_keys_and_no_key_in_the_logs(sqlite_url, tmp_path):
    from app.platform.migrate import upgrade

    upgrade(sqlite_url)
    created = _cli(sqlite_url, "keys", "create", "--name", "ops", "--scope", "admin")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    key_id = keys.KEY_PATTERN.match(key).group(1)
    assert key not in created.stderr and key_id in created.stderr
    listed = _cli(sqlite_url, "keys", "list")
    assert key_id in listed.stdout and "admin" in listed.stdout and key not in listed.stdout
    refused = _cli(sqlite_url, "keys", "create", "--name", "x", "--scope", "root")
    assert refused.returncode == 2 and "invalid choice" in refused.stderr
    env = {"CALIBRATION_API_KEYS_ENABLED": "true", "CALIBRATION_LOG_LEVEL": "debug"}
    log_file = tmp_path / "server.log"
    with live_server(sqlite_url, env=env, log_file=log_file) as base:
        headers = {"x-api-key": key}
        assert HTTP.post(f"{base}/v1/calibrators/logged/versions", json=FIT, headers=headers).status_code == 201
        assert HTTP.get(f"{base}/v1/calibrators/logged", headers={"authorization": f"Bearer {key}"}).status_code == 200
        assert HTTP.get(f"{base}/v1/calibrators", headers={"x-api-key": key[:-1] + "x"}).status_code == 401
        assert HTTP.get(f"{base}/v1/calibrators").status_code == 401
    logs = log_file.read_text()
    assert '"status":201' in logs and '"status":401' in logs  # the requests were logged ...
    assert key not in logs and key[:-1] not in logs  # ... and no key was
    revoked = _cli(sqlite_url, "keys", "revoke", key_id)
    assert revoked.returncode == 0 and _cli(sqlite_url, "keys", "revoke", key_id).returncode == 1
    assert "revoked" in _cli(sqlite_url, "keys", "list").stdout
