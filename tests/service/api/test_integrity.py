"""Version digests (#17): they cover every stored column of a version, can be keyed (HMAC with
CALIBRATION_INTEGRITY_KEY) so that a database writer without the key cannot forge a calibrator,
and the migrations that changed them (0005, 0014) never launder a tampered row."""

from __future__ import annotations

import base64
import hashlib
import hmac

import orjson
from sqlalchemy import text
from starlette.testclient import TestClient

from app import cli
from app.main import create_app
from app.platform.migrate import downgrade, upgrade
from app.registry.schemas import EXAMPLE_LABELS, EXAMPLE_LOGITS
from app.settings import Settings, get_settings

KEY = "a-long-random-integrity-key"
FIT = {"method": "temperature", "logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS,
       "class_names": ["cat", "dog", "eel"]}
BATCH = {"logits": EXAMPLE_LOGITS[:2], "outputs": ["predicted_class"]}


def _client(url: str, key: str | None = None) -> TestClient:
    return TestClient(create_app(Settings(database_url=url, integrity_key=key)))


def _row(client: TestClient) -> dict:
    with client.app.state.db.read() as session:
        row = session.execute(text("SELECT params_json, class_names, tensor_names, checksum FROM calibrator_versions "
                                   "WHERE version = 1")).one()
    return row._asdict()


def _whole_record(client: TestClient) -> bytes:
    """Version 1's record as the digest covers it, from the API's view and the stored parameters:
    canonical JSON (keys sorted), the creation time in UTC to the microsecond."""
    view = client.get("/v1/calibrators/demo/versions/1").json()
    record = {"name": "demo", "version": 1, "method": view["method"], "input_kind": view["input"],
              "n_classes": view["n_classes"], "n_samples": view["n_samples"], "class_names": view["class_names"],
              "params_json": _row(client)["params_json"], "summary": view["parameters"],
              "diagnostics": view["diagnostics"], "report": view["report"], "description": view["description"],
              "tags": view["tags"], "tensor_names": view["tensor_names"], "created_at": view["created_at"]}
    assert view["created_at"].endswith("+00:00") and len(view["created_at"]) == len("2026-01-01T00:00:00.000000+00:00")
    return orjson.dumps(record, option=orjson.OPT_SORT_KEYS)


def test_a_keyed_digest_is_the_hmac_of_every_stored_column(database_url):
    with _client(database_url, KEY) as client:
        fitted = client.post("/v1/calibrators/demo/versions", json={**FIT, "tags": {"b": "1", "a": "2"}})
        assert fitted.status_code == 201
        signature = hmac.new(KEY.encode(), _whole_record(client), hashlib.sha256).digest()
        assert _row(client)["checksum"] == "hmac-sha256-v2:" + base64.urlsafe_b64encode(signature).decode().rstrip("=")
        assert client.post("/v1/calibrators/demo/calibrate", json=BATCH).status_code == 200
    with _client(database_url) as unkeyed:  # a process without the key cannot vouch for the row
        refused = unkeyed.post("/v1/calibrators/demo/versions/1/calibrate", json=BATCH)
        assert refused.status_code == 500 and "CALIBRATION_INTEGRITY_KEY is not set" in refused.json()["detail"]
    with _client(database_url, "another-key") as forger:
        refused = forger.post("/v1/calibrators/demo/versions/1/calibrate", json=BATCH)
        assert refused.status_code == 500 and "do not match their digest" in refused.json()["detail"]


def test_a_writer_without_the_key_cannot_forge_a_version(database_url):
    with _client(database_url, KEY) as client:
        assert client.post("/v1/calibrators/demo/versions", json=FIT).status_code == 201
        row = _row(client)
        names = ["eel", "dog", "cat"]  # swap the names and recompute the unkeyed digest, as a forger could
        digest = hashlib.sha256(orjson.dumps([row["params_json"], names, None], option=orjson.OPT_SORT_KEYS))
        forged = "sha256:" + base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")
        with client.app.state.db.write() as session:
            session.execute(text("UPDATE calibrator_versions SET class_names = :names, checksum = :checksum"),
                            {"names": orjson.dumps(names).decode(), "checksum": forged})
    with _client(database_url, KEY) as fresh:
        refused = fresh.post("/v1/calibrators/demo/calibrate", json=BATCH)
        assert refused.status_code == 500 and "not signed with CALIBRATION_INTEGRITY_KEY" in refused.json()["detail"]


def test_versions_stored_before_the_key_are_signed_by_the_cli(database_url, monkeypatch):
    with _client(database_url) as client:
        assert client.post("/v1/calibrators/demo/versions", json=FIT).status_code == 201
        assert _row(client)["checksum"].startswith("sha256-v2:")
    with _client(database_url, KEY) as keyed:
        assert keyed.post("/v1/calibrators/demo/calibrate", json=BATCH).status_code == 500
    monkeypatch.setenv("DATABASE_URL", database_url)
    get_settings.cache_clear()
    try:
        assert cli.main(["sign-versions"]) == 2  # no key: nothing to sign with
        monkeypatch.setenv("CALIBRATION_INTEGRITY_KEY", KEY)
        get_settings.cache_clear()
        assert cli.main(["sign-versions"]) == 0
    finally:
        get_settings.cache_clear()
    with _client(database_url, KEY) as keyed:
        served = keyed.post("/v1/calibrators/demo/calibrate", json=BATCH)
        assert served.status_code == 200 and served.json()["predicted_class_name"][0] == "cat"
        assert _row(keyed)["checksum"].startswith("hmac-sha256-v2:")


def test_the_migration_moves_intact_rows_to_digests_and_keeps_tampered_ones_refused(database_url):
    with _client(database_url) as client:
        for _ in range(2):
            assert client.post("/v1/calibrators/demo/versions", json=FIT).status_code == 201
    downgrade(database_url, "0004")
    engine_client = _client(database_url)
    with engine_client.app.state.db.write() as session:
        legacy = session.execute(text("SELECT version, params_json, checksum FROM calibrator_versions")).all()
        assert all(checksum == hashlib.sha256(params.encode()).hexdigest() for _, params, checksum in legacy)
        session.execute(text("UPDATE calibrator_versions SET params_json = replace(params_json, :old, :new) "
                             "WHERE version = 2"), {"old": '"temperature":', "new": '"temperature":1'})
    upgrade(database_url)
    with _client(database_url) as client:
        assert client.post("/v1/calibrators/demo/versions/1/calibrate", json=BATCH).status_code == 200
        tampered = client.post("/v1/calibrators/demo/versions/2/calibrate", json=BATCH)
        assert tampered.status_code == 500 and "integrity check" in tampered.json()["detail"]


def _first_digest(row: dict) -> str:
    names = orjson.loads(row["class_names"]) if isinstance(row["class_names"], str) else row["class_names"]
    message = orjson.dumps([row["params_json"], names, None], option=orjson.OPT_SORT_KEYS)
    return "sha256:" + base64.urlsafe_b64encode(hashlib.sha256(message).digest()).decode().rstrip("=")


def test_migration_0014_moves_intact_rows_to_whole_record_digests_and_keeps_tampered_ones_refused(database_url):
    with _client(database_url) as client:
        for _ in range(2):
            assert client.post("/v1/calibrators/demo/versions", json=FIT).status_code == 201
        whole = hashlib.sha256(_whole_record(client)).digest()
        assert _row(client)["checksum"] == "sha256-v2:" + base64.urlsafe_b64encode(whole).decode().rstrip("=")
    downgrade(database_url, "0013")
    with _client(database_url) as client:
        assert _row(client)["checksum"] == _first_digest(_row(client))  # the release before's digest
        with client.app.state.db.write() as session:  # tamper with version 2 under the first digest
            session.execute(text("UPDATE calibrator_versions SET params_json = replace(params_json, :old, :new) "
                                 "WHERE version = 2"), {"old": '"temperature":', "new": '"temperature":1'})
    upgrade(database_url)
    with _client(database_url) as client:
        assert _row(client)["checksum"].startswith("sha256-v2:")
        assert client.post("/v1/calibrators/demo/versions/1/calibrate", json=BATCH).status_code == 200
        tampered = client.post("/v1/calibrators/demo/versions/2/calibrate", json=BATCH)
        assert tampered.status_code == 500 and "do not match their digest" in tampered.json()["detail"]
        listed = client.get("/v1/calibrators/demo/versions").json()
        assert [v["version"] for v in listed["versions"]] == [1] and listed["damaged"][0]["version"] == 2


def test_versions_signed_with_the_first_digest_still_verify_and_are_re_signed_by_the_cli(database_url, monkeypatch):
    with _client(database_url, KEY) as client:
        assert client.post("/v1/calibrators/demo/versions", json=FIT).status_code == 201
        row = _row(client)
        names = orjson.loads(row["class_names"]) if isinstance(row["class_names"], str) else row["class_names"]
        message = orjson.dumps([row["params_json"], names, None], option=orjson.OPT_SORT_KEYS)
        first = "hmac-sha256:" + base64.urlsafe_b64encode(hmac.new(KEY.encode(), message, hashlib.sha256)
                                                          .digest()).decode().rstrip("=")
        with client.app.state.db.write() as session:  # as the release before signed it
            session.execute(text("UPDATE calibrator_versions SET checksum = :checksum"), {"checksum": first})
    with _client(database_url, KEY) as keyed:
        assert keyed.post("/v1/calibrators/demo/calibrate", json=BATCH).status_code == 200
        assert keyed.get("/v1/calibrators/demo/versions").json()["damaged"] == []
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("CALIBRATION_INTEGRITY_KEY", KEY)
    get_settings.cache_clear()
    try:
        assert cli.main(["sign-versions"]) == 0
    finally:
        get_settings.cache_clear()
    with _client(database_url, KEY) as keyed:
        assert _row(keyed)["checksum"].startswith("hmac-sha256-v2:")
        assert keyed.post("/v1/calibrators/demo/calibrate", json=BATCH).status_code == 200


def test_one_function_writes_a_version_as_canonical_sealed_json(database_url):
    """``registry.writes.write_version`` (what fits and online updates both call): numbered in turn,
    parameters as sorted-key JSON, diagnostics and summary beside them, and a digest that verifies."""
    import numpy as np

    import calibration as cal
    from app.platform.db import Database
    from app.registry import integrity
    from app.registry.writes import NewVersion, write_version

    upgrade(database_url)
    logits = np.array(EXAMPLE_LOGITS, dtype=np.float64)
    calibrator = cal.create("temperature").fit(logits, np.array(EXAMPLE_LABELS))
    params = calibrator.to_dict()
    db = Database(database_url)
    try:
        with db.write() as session:
            first = write_version(session, "written", NewVersion(calibrator, params, "logits", logits.shape[1],
                                                                 len(logits), {"score": np.float64(0.5)}), None)
            second = write_version(session, "written", NewVersion(calibrator, params, "logits", logits.shape[1],
                                                                  len(logits), tags={"by": "test"}), b"k" * 32)
            rows = [(row.version, row.method, row.params_json, row.diagnostics, row.report, row.tags,
                     integrity.digest(integrity.record_of("written", row), key) == row.checksum)
                    for row, key in ((first, None), (second, b"k" * 32))]
    finally:
        db.dispose()
    canonical = orjson.dumps(params, option=orjson.OPT_SORT_KEYS).decode()
    assert rows == [(1, "temperature", canonical, params["diagnostics"], {"score": 0.5}, None, True),
                    (2, "temperature", canonical, params["diagnostics"], {}, {"by": "test"}, True)]
