"""Set predictors of calibrator versions through the API: stored with a digest, fitted by split
conformal on held-out rows calibrated by the version (thresholds and sets equal to the core's
``SetPredictor`` on the same rows of a CIFAR-10 ResNet-50 cut), served by calibrate (JSON lists, an
``.npy`` mask) and ``/v2``, deleted with their version; bad input is a 4xx that says why."""

from __future__ import annotations

import io
import math

import numpy as np
import orjson
import pytest
from sqlalchemy import text

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


@pytest.mark.parametrize(("body", "says"), [
    ({"coverage": [0.9]}, "labels are required"),
    ({"coverage": [1.0]}, "coverage level must lie in (0, 1)"),
    ({"coverage": []}, "coverage"),
    ({"coverage": [0.9, 0.9]}, "listed twice"),
    ({"coverage": [0.9], "score": "topk"}, "score"),
    ({"coverage": [0.9], "k_reg": 11, "score": "raps"}, "k_reg"),
    ({"coverage": [0.9], "probabilities": [[0.5, 0.5]] * 20, "labels": [0] * 20}, "fitted on logits"),
])
def test_bad_fits_are_422s_that_say_why(fitted, cut, body, says):
    if "labels" not in body and "coverage" in body and body != {"coverage": [0.9]}:
        logits, labels = cut["held_out"]
        body = {"logits": logits[:100].tolist(), "labels": labels[:100].tolist(), **body}
    elif body == {"coverage": [0.9]}:
        body = {**body, "logits": cut["held_out"][0][:10].tolist()}
    response = fitted.post(BASE, json=body)
    assert response.status_code == 422 and says in response.json()["detail"], response.text


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
