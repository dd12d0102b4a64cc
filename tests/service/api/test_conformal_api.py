"""Set predictors of calibrator versions through the API: stored with a digest, fitted by split
conformal on held-out rows calibrated by the version (thresholds and sets equal to the core's
``SetPredictor`` on the same rows of a CIFAR-10 ResNet-50 cut), served by calibrate (JSON lists, an
``.npy`` mask) and ``/v2``, deleted with their version; bad input is a 4xx that says why."""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import math

import numpy as np
import orjson
import pytest
from sqlalchemy import text
from starlette.testclient import TestClient

from app import cli
from app.main import create_app
from app.settings import Settings, get_settings
from calibration import SetPredictor
from tests.helpers import load_split

DATA = "cifar10_resnet50_cross_entropy"
BASE = "/v1/calibrators/resnet50/versions/1/set-predictors"


def npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def cut():
    _, logits, labels = load_split(DATA, "val")
    _, test_logits, test_labels = load_split(DATA, "test")
    return {"fit": (logits[:2500], labels[:2500]), "held_out": (logits[2500:], labels[2500:]),
            "test": (test_logits[:400], test_labels[:400])}


@pytest.fixture
def fitted(client, cut):
    logits, labels = cut["fit"]
    response = client.post("/v1/calibrators/resnet50/versions", content=npz(logits=logits, labels=labels),
                           headers={"content-type": "application/x-npz"}, params={"method": "temperature"})
    assert response.status_code == 201, response.text
    return client


def version_probabilities(client, logits) -> np.ndarray:
    """The version's own calibrated probabilities, as calibrate serves them (float64 JSON, exact)."""
    served = client.post("/v1/calibrators/resnet50/versions/1/calibrate", json={"logits": logits.tolist()}).json()
    return np.asarray(served["probabilities"])


def fit_sets(client, cut, **fields):
    logits, labels = cut["held_out"]
    body = {"score": "aps", "coverage": [0.9, 0.95], "logits": logits.tolist(), "labels": labels.tolist(), **fields}
    return client.post(BASE, json=body)


def test_a_set_predictor_has_the_core_s_thresholds_on_the_version_s_probabilities(fitted, cut):
    response = fit_sets(fitted, cut)
    assert response.status_code == 201, response.text
    stored = response.json()
    assert response.headers["location"] == f"{BASE}/{stored['id']}"
    logits, labels = cut["held_out"]
    probabilities = version_probabilities(fitted, logits)
    core = SetPredictor.fit(probabilities, labels, score="aps", alphas=[0.1, 0.05])
    assert stored["thresholds"] == pytest.approx([float(q) for q in core.thresholds], abs=1e-12)
    assert stored["counts"] == [2500] and stored["n_samples"] == 2500
    assert stored["coverage"] == [0.9, 0.95] and stored["score"] == "aps" and not stored["class_conditional"]
    assert stored["source"] == {"kind": "rows", "rows": 2500}
    assert stored["checksum"].startswith("sha256-v2:")
    # the threshold is the ceil(2501 * 0.9) = 2251st smallest held-out APS score
    scores = np.sort(core.scores(probabilities)[np.arange(len(labels)), labels])
    assert stored["thresholds"][0] == pytest.approx(scores[math.ceil(2501 * 0.9) - 1], abs=1e-12)


def test_class_conditional_raps_has_one_threshold_per_class(fitted, cut):
    response = fit_sets(fitted, cut, score="raps", k_reg=2, lam=0.01, class_conditional=True, coverage=[0.9])
    assert response.status_code == 201, response.text
    stored = response.json()
    logits, labels = cut["held_out"]
    core = SetPredictor.fit(version_probabilities(fitted, logits), labels, score="raps", alphas=[0.1], k_reg=2,
                            lam=0.01, class_conditional=True)
    assert stored["thresholds"] == [pytest.approx(core.thresholds[0], abs=1e-12)]
    assert stored["counts"] == np.bincount(labels, minlength=10).tolist()
    assert stored["options"] == {"k_reg": 2, "lam": 0.01, "randomized": False, "seed": 0}


def test_list_get_delete_and_the_version_s_delete_takes_its_set_predictors(fitted, cut):
    first = fit_sets(fitted, cut).json()
    second = fit_sets(fitted, cut, score="lac", coverage=[0.8]).json()
    listed = fitted.get(BASE).json()
    assert [p["id"] for p in listed["set_predictors"]] == [second["id"], first["id"]] and listed["damaged"] == []
    assert fitted.get(f"{BASE}/{first['id']}").json() == first
    assert fitted.delete(f"{BASE}/{first['id']}").status_code == 204
    gone = fitted.get(f"{BASE}/{first['id']}")
    assert gone.status_code == 404 and f"no set predictor {first['id']}" in gone.json()["detail"]
    assert fitted.get("/v1/calibrators/resnet50/versions/2/set-predictors").status_code == 404
    assert fitted.delete("/v1/calibrators/resnet50/versions/1").status_code == 204
    with fitted.app.state.db.read() as session:
        assert session.execute(text("SELECT COUNT(*) FROM set_predictors")).scalar_one() == 0


def test_a_stored_set_predictor_is_sealed_and_a_tampered_one_is_refused(fitted, cut):
    stored = fit_sets(fitted, cut).json()
    with fitted.app.state.db.write() as session:
        params = orjson.loads(session.execute(text("SELECT params_json FROM set_predictors")).scalar_one())
        params["thresholds"][0] = 0.999999  # a larger threshold: bigger sets than were fitted
        session.execute(text("UPDATE set_predictors SET params_json = :p"), {"p": orjson.dumps(params).decode()})
    refused = fitted.get(f"{BASE}/{stored['id']}")
    assert refused.status_code == 500 and "do not match their digest" in refused.json()["detail"]
    listed = fitted.get(BASE).json()
    assert listed["set_predictors"] == [] and listed["damaged"][0]["id"] == stored["id"]


BAD_FITS = [
    ({"coverage": [0.9]}, "labels are required"),
    ({"coverage": [1.0]}, "coverage level must lie in (0, 1)"),
    ({"coverage": []}, "coverage"),
    ({"coverage": [0.9, 0.9]}, "listed twice"),
    ({"coverage": [0.9], "score": "topk"}, "score"),
    ({"coverage": [0.9], "k_reg": 11, "score": "raps"}, "k_reg"),
    ({"coverage": [0.9], "probabilities": [[0.5, 0.5]] * 20, "labels": [0] * 20}, "fitted on logits"),
]


def test_bad_fits_are_422s_that_say_why(fitted, cut):
    """Each refused fit on the same version (a refusal stores nothing: nothing listed after them)."""
    for body, says in BAD_FITS:
        if "labels" not in body and "coverage" in body and body != {"coverage": [0.9]}:
            logits, labels = cut["held_out"]
            body = {"logits": logits[:100].tolist(), "labels": labels[:100].tolist(), **body}
        elif body == {"coverage": [0.9]}:
            body = {**body, "logits": cut["held_out"][0][:10].tolist()}
        response = fitted.post(BASE, json=body)
        assert response.status_code == 422 and says in response.json()["detail"], (says, response.text)
    assert fitted.get(BASE).json()["set_predictors"] == []


def test_too_few_rows_for_a_level_is_a_422_naming_the_rows_it_needs(fitted, cut):
    logits, labels = cut["held_out"]
    response = fitted.post(BASE, json={"coverage": [0.9, 0.99], "logits": logits[:50].tolist(),
                                       "labels": labels[:50].tolist()})
    assert response.status_code == 422
    assert "coverage 0.99 needs at least 99 held-out rows" in response.json()["detail"]  # ceil(100 * 0.99) = 99
    conditional = fitted.post(BASE, json={"coverage": [0.9], "class_conditional": True,
                                          "logits": logits[:50].tolist(), "labels": labels[:50].tolist()})
    assert conditional.status_code == 422 and "per class" in conditional.json()["detail"]
    assert fitted.post(BASE, json={"coverage": [0.9], "logits": logits[:9].tolist(),
                                   "labels": labels[:9].tolist()}).status_code == 201  # ceil(10 * 0.9) = 9 <= 9
    assert fitted.post(BASE, json={"coverage": [0.9], "logits": logits[:8].tolist(),
                                   "labels": labels[:8].tolist()}).status_code == 422  # ceil(9 * 0.9) = 9 > 8


def test_a_set_predictor_fitted_on_stored_observations(fitted, cut):
    logits, labels = cut["held_out"]
    appended = fitted.post("/v1/calibrators/resnet50/observations", content=npz(logits=logits, labels=labels),
                           headers={"content-type": "application/x-npz"})
    assert appended.status_code in (200, 201), appended.text
    response = fitted.post(BASE, json={"coverage": [0.9], "score": "lac",
                                       "data": {"observations": {"source": "upload"}}})
    assert response.status_code == 201, response.text
    stored = response.json()
    assert stored["source"] == {"kind": "observations", "query": {"source": "upload"}, "rows": 2500}
    core = SetPredictor.fit(version_probabilities(fitted, logits), labels, score="lac", alphas=[0.1])
    assert stored["thresholds"] == [pytest.approx(core.thresholds[0], abs=1e-12)]


# -- serving ---------------------------------------------------------------------------------

@pytest.fixture
def serving(fitted, cut):
    """Version 1 with an APS set predictor at 0.9 and 0.95 (fitted second: the newest) and a LAC one at 0.9."""
    lac = fit_sets(fitted, cut, score="lac", coverage=[0.9]).json()
    aps = fit_sets(fitted, cut).json()
    logits, labels = cut["held_out"]
    probabilities = version_probabilities(fitted, logits)
    cores = {"aps": SetPredictor.fit(probabilities, labels, score="aps", alphas=[0.1, 0.05]),
             "lac": SetPredictor.fit(probabilities, labels, score="lac", alphas=[0.1])}
    return fitted, {"aps": aps["id"], "lac": lac["id"]}, cores


def rows_of(mask: np.ndarray) -> list[list[int]]:
    return [np.flatnonzero(row).tolist() for row in mask]


def test_calibrate_serves_the_core_s_sets_from_the_newest_set_predictor_at_the_level(serving, cut):
    client, ids, cores = serving
    logits, labels = cut["test"]
    answer = client.post("/v1/calibrators/resnet50/calibrate",
                         json={"logits": logits.tolist(), "outputs": ["probabilities", "set"], "coverage": 0.95})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    probabilities = np.asarray(body["probabilities"])
    expected = cores["aps"].predict_sets(probabilities, 0.05)
    assert body["set"] == rows_of(expected) and body["set_predictor"] == ids["aps"] and body["coverage"] == 0.95
    assert answer.headers["x-set-predictor"] == str(ids["aps"])
    covered = np.mean([y in s for y, s in zip(labels, body["set"], strict=True)])
    assert covered > 0.9 and 1 < np.mean([len(s) for s in body["set"]]) < 10  # 400 test rows: 0.95, 3.5 classes
    older = client.post("/v1/calibrators/resnet50/versions/1/calibrate",
                        json={"logits": logits.tolist(), "outputs": ["set"], "coverage": 0.9,
                              "set_predictor": ids["lac"]}).json()
    assert older["set"] == rows_of(cores["lac"].predict_sets(probabilities, 0.1)) and "probabilities" not in older


def test_an_npy_caller_gets_the_uint8_mask(serving, cut):
    client, ids, cores = serving
    logits, _ = cut["test"]
    buffer = io.BytesIO()
    np.save(buffer, logits)
    answer = client.post("/v1/calibrators/resnet50/calibrate", content=buffer.getvalue(),
                         params={"outputs": "set", "coverage": "0.9"},
                         headers={"content-type": "application/x-npy", "accept": "application/x-npy"})
    assert answer.status_code == 200, answer.text
    mask = np.load(io.BytesIO(answer.content))
    assert mask.dtype == np.uint8 and mask.shape == (400, 10)
    probabilities = np.asarray(client.post("/v1/calibrators/resnet50/calibrate",
                                           json={"logits": logits.tolist()}).json()["probabilities"])
    assert np.array_equal(mask, cores["aps"].predict_sets(probabilities, 0.1).astype(np.uint8))
    assert answer.headers["x-set-predictor"] == str(ids["aps"])
    both = client.post("/v1/calibrators/resnet50/calibrate", content=buffer.getvalue(),
                       params={"outputs": "probabilities,set", "coverage": "0.9"},
                       headers={"content-type": "application/x-npy", "accept": "application/x-npy"})
    assert both.status_code == 422 and "one array" in both.json()["detail"]


def test_an_alias_serves_its_version_s_set_predictor(serving, cut):
    client, ids, cores = serving
    logits, labels = cut["fit"]
    assert client.post("/v1/calibrators/resnet50/versions", json={"method": "temperature", "logits": logits[:500]
                                                                  .tolist(), "labels": labels[:500].tolist()}
                       ).status_code == 201
    assert client.put("/v1/calibrators/resnet50/aliases/production", json={"version": 1}).status_code == 200
    test_logits = cut["test"][0][:50].tolist()
    served = client.post("/v1/calibrators/resnet50@production/calibrate",
                         json={"logits": test_logits, "outputs": ["probabilities", "set"], "coverage": 0.9}).json()
    assert served["version"] == 1 and served["set_predictor"] == ids["aps"]
    assert served["set"] == rows_of(cores["aps"].predict_sets(np.asarray(served["probabilities"]), 0.1))
    latest = client.post("/v1/calibrators/resnet50/calibrate",
                         json={"logits": test_logits, "outputs": ["set"], "coverage": 0.9})
    assert latest.status_code == 404
    assert "version 2: no set predictor at coverage 0.9" in latest.json()["detail"]


BAD_SET_REQUESTS = [
    ({"outputs": ["set"], "coverage": 0.8}, 404, "no set predictor at coverage 0.8 (fitted levels: [0.9, 0.95])"),
    ({"outputs": ["set"], "coverage": 0.9, "set_predictor": 999}, 404, "has no set predictor 999"),
    ({"outputs": ["set"], "coverage": 0.95, "set_predictor": "lac"}, 422, "set_predictor"),
    ({"outputs": ["set"]}, 422, "outputs 'set' needs `coverage`"),
    ({"outputs": ["probabilities"], "coverage": 0.9}, 422, "add 'set' to outputs"),
    ({"outputs": ["set"], "coverage": 1.5}, 422, "coverage"),
]


def test_bad_set_requests_are_problems_that_say_why(serving, cut):
    """Each bad request to the same serving version (a refused calibrate changes nothing)."""
    client, ids, _ = serving
    for fields, status, says in BAD_SET_REQUESTS:
        if fields.get("set_predictor") == "lac":
            fields = {**fields, "set_predictor": ids["lac"]}  # fitted at 0.9 only
            status, says = 404, f"set predictor {ids['lac']} at coverage 0.95"
        answer = client.post("/v1/calibrators/resnet50/calibrate",
                             json={"logits": cut["test"][0][:5].tolist(), **fields})
        assert answer.status_code == status and says in answer.json()["detail"], (says, answer.text)


def test_v2_serves_the_set_tensor_as_json_and_binary(serving, cut):
    client, ids, cores = serving
    logits = np.ascontiguousarray(cut["test"][0][:20], dtype=np.float32)
    request = {"inputs": [{"name": "logits", "shape": list(logits.shape), "datatype": "FP32",
                           "data": logits.ravel().tolist()}],
               "outputs": [{"name": "probabilities"}, {"name": "set"}], "parameters": {"coverage": 0.9}}
    answer = client.post("/v2/models/resnet50/infer", json=request)
    assert answer.status_code == 200, answer.text
    outputs = {o["name"]: o for o in answer.json()["outputs"]}
    probabilities = np.asarray(outputs["probabilities"]["data"], dtype=np.float64).reshape(20, 10)
    sets = outputs["set"]
    assert sets["datatype"] == "BOOL" and sets["shape"] == [20, 10]
    assert sets["parameters"] == {"coverage": 0.9, "set_predictor": ids["aps"]}
    # FP32 probabilities on the wire: compare with the core on the float64 ones the service used
    exact = np.asarray(client.post("/v1/calibrators/resnet50/calibrate", json={"logits": logits.tolist()}
                                   ).json()["probabilities"])
    assert np.allclose(probabilities, exact, atol=1e-6)
    expected = cores["aps"].predict_sets(exact, 0.1)
    assert np.array_equal(np.asarray(sets["data"]).reshape(20, 10), expected)
    binary = client.post("/v2/models/resnet50/versions/1/infer",
                         json={**request, "outputs": [{"name": "set", "parameters": {"binary_data": True}}]})
    header_length = int(binary.headers["inference-header-content-length"])
    header = orjson.loads(binary.content[:header_length])
    assert header["outputs"][0]["parameters"]["binary_data_size"] == 200
    mask = np.frombuffer(binary.content[header_length:], dtype=np.bool_).reshape(20, 10)
    assert np.array_equal(mask, expected)
    metadata = client.get("/v2/models/resnet50").json()  # the version has set predictors: the output is listed
    assert metadata["outputs"][-1] == {"name": "set", "datatype": "BOOL", "shape": [-1, 10]}
    missing = client.post("/v2/models/resnet50/infer", json={**request, "parameters": {}})
    assert missing.status_code == 400 and "needs the request parameter 'coverage'" in missing.json()["error"]
    unknown = client.post("/v2/models/resnet50/infer", json={**request, "parameters": {"coverage": 0.5}})
    assert unknown.status_code == 404 and "no set predictor at coverage 0.5" in unknown.json()["error"]


def test_logged_predictions_with_sets_keep_their_ids_and_take_labels(serving, cut):
    client, _, _ = serving
    assert client.put("/v1/calibrators/resnet50/logging", json={"sample_rate": 1}).status_code == 200
    logits, labels = cut["test"]
    prediction_ids = [f"p{i}" for i in range(100)]
    answer = client.post("/v1/calibrators/resnet50/calibrate",
                         json={"logits": logits[:100].tolist(), "outputs": ["set"], "coverage": 0.9,
                               "ids": prediction_ids}).json()
    assert answer["ids"] == prediction_ids and answer["logged"] == 100 and len(answer["set"]) == 100
    labelled = client.post("/v1/calibrators/resnet50/labels", json={"ids": prediction_ids,
                                                                  "labels": labels[:100].tolist()}).json()
    assert labelled["labelled"] == 100


# -- integrity -------------------------------------------------------------------------------

KEY = "a-long-random-integrity-key"


def stored_record(client, stored: dict) -> bytes:
    """A set predictor's record as its digest covers it, written out by hand: the calibrator's name and
    version and every stored column but the id and the digest, as canonical JSON (keys sorted, the
    creation time in UTC to the microsecond)."""
    with client.app.state.db.read() as session:
        params_json = session.execute(text("SELECT params_json FROM set_predictors WHERE id = :i"),
                                      {"i": stored["id"]}).scalar_one()
    options = {**stored["options"], "class_conditional": stored["class_conditional"]}
    record = {"name": stored["name"], "version": stored["version"], "score": stored["score"], "options": options,
              "coverage": stored["coverage"], "params_json": params_json, "source": stored["source"],
              "n_samples": stored["n_samples"], "created_at": stored["created_at"]}
    return orjson.dumps(record, option=orjson.OPT_SORT_KEYS)


def digest_text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_the_digest_is_the_sha256_of_the_whole_record_and_keyed_the_hmac(database_url, cut, monkeypatch):
    logits, labels = cut["held_out"]
    body = {"coverage": [0.9], "score": "lac", "logits": logits[:200].tolist(), "labels": labels[:200].tolist()}
    fit = {"method": "temperature", "logits": cut["fit"][0][:500].tolist(), "labels": cut["fit"][1][:500].tolist()}
    with TestClient(create_app(Settings(database_url=database_url))) as plain:
        assert plain.post("/v1/calibrators/resnet50/versions", json=fit).status_code == 201
        stored = plain.post(BASE, json=body).json()
        assert stored["checksum"] == "sha256-v2:" + digest_text(hashlib.sha256(stored_record(plain, stored)).digest())
    with TestClient(create_app(Settings(database_url=database_url, integrity_key=KEY))) as keyed:
        refused = keyed.get(f"{BASE}/{stored['id']}")  # unkeyed: a database writer could have made it
        assert refused.status_code == 500 and "not signed with CALIBRATION_INTEGRITY_KEY" in refused.json()["detail"]
        monkeypatch.setenv("DATABASE_URL", database_url)
        monkeypatch.setenv("CALIBRATION_INTEGRITY_KEY", KEY)
        get_settings.cache_clear()
        try:
            assert cli.main(["sign-versions"]) == 0  # signs the versions and their set predictors
        finally:
            get_settings.cache_clear()
        signed = keyed.get(f"{BASE}/{stored['id']}").json()
        expected = hmac.new(KEY.encode(), stored_record(keyed, signed), hashlib.sha256).digest()
        assert signed["checksum"] == "hmac-sha256-v2:" + digest_text(expected)
        served = keyed.post("/v1/calibrators/resnet50/calibrate",
                            json={"logits": cut["test"][0][:5].tolist(), "outputs": ["set"], "coverage": 0.9})
        assert served.status_code == 200 and served.json()["set_predictor"] == stored["id"]
        second = keyed.post(BASE, json=body).json()
        assert second["checksum"] == "hmac-sha256-v2:" + digest_text(
            hmac.new(KEY.encode(), stored_record(keyed, second), hashlib.sha256).digest())


def test_held_out_rows_are_held_to_the_fit_budgets(database_url, cut):
    logits, labels = cut["held_out"]
    fit = {"method": "temperature", "logits": cut["fit"][0][:500].tolist(), "labels": cut["fit"][1][:500].tolist()}
    settings = Settings(database_url=database_url, max_entries=10_000, max_fit_entries=5_000)
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/calibrators/resnet50/versions", json=fit).status_code == 201
        posted = client.post(BASE, content=npz(logits=logits[:1001], labels=labels[:1001]),
                             params={"coverage": "0.9"}, headers={"content-type": "application/x-npz"})
        assert posted.status_code == 413 and "CALIBRATION_MAX_ENTRIES" in posted.json()["detail"]
        assert client.post("/v1/calibrators/resnet50/observations",
                           content=npz(logits=logits[:600], labels=labels[:600]),
                           headers={"content-type": "application/x-npz"}).status_code == 201
        stored = client.post(BASE, json={"coverage": [0.9], "data": {"observations": {}}})
        assert stored.status_code == 413 and "CALIBRATION_MAX_FIT_ENTRIES" in stored.json()["detail"]
        within = client.post(BASE, json={"coverage": [0.9], "data": {"observations": {"last": 500}}})
        assert within.status_code == 201 and within.json()["n_samples"] == 500
