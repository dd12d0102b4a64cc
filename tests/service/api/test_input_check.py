"""Probabilities sent as logits: a logits batch whose every row is non-negative and sums to 1
(within 1e-6) is refused with a 422 (a 400 on /v2) at fit, calibrate, report, metrics, compare
and /v2 inference, unless the request sets ``input_check: false``; real logits pass."""

from __future__ import annotations

import io

import numpy as np
import pytest

import calibration as cal
from app.registry.schemas import EXAMPLE_LABELS, EXAMPLE_LOGITS
from tests.helpers import make_reference_input

LOGITS, LABELS = make_reference_input(n=200, k=3, seed=5)
PROBABILITIES = cal.softmax(LOGITS)
DETAIL = ("these look like probabilities; send them as `probabilities` (every row of the logits is non-negative "
          "and sums to 1; set input_check to false if they really are logits)")
V2_DETAIL = ("these look like probabilities; send them as `probabilities` (every row of the logits is "
             "non-negative and sums to 1, and this model was fitted on logits; set the request parameter "
             "input_check to false if they really are logits)")
ENDPOINTS = [
    ("/v1/calibrators/x/versions", {"method": "temperature", "labels": LABELS.tolist()}, 201),
    ("/v1/calibrators/demo/calibrate", {}, 200),
    ("/v1/calibrators/demo/versions/1/calibrate", {}, 200),
    ("/v1/calibrators/demo/report", {"labels": LABELS.tolist()}, 200),
    ("/v1/metrics", {"labels": LABELS.tolist()}, 200),
    ("/v1/compare", {"labels": LABELS.tolist(), "methods": ["temperature"], "folds": 2}, 200),
]


@pytest.fixture
def demo(client):
    body = {"method": "temperature", "logits": LOGITS.tolist(), "labels": LABELS.tolist()}
    assert client.post("/v1/calibrators/demo/versions", json=body).status_code == 201
    return client


@pytest.mark.parametrize(("path", "fields", "status"), ENDPOINTS, ids=[e[0] for e in ENDPOINTS])
def test_probabilities_sent_as_logits_are_refused_unless_the_check_is_off(demo, path, fields, status):
    refused = demo.post(path, json={"logits": PROBABILITIES.tolist(), **fields})
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["detail"] == DETAIL
    accepted = demo.post(path, json={"logits": PROBABILITIES.tolist(), "input_check": False, **fields})
    assert accepted.status_code == status, accepted.text
    as_logits = demo.post(path, json={"logits": LOGITS.tolist(), **fields})
    assert as_logits.status_code == status, as_logits.text


def test_probabilities_as_probabilities_and_real_logits_pass(demo):
    assert demo.post("/v1/metrics", json={"probabilities": PROBABILITIES.tolist(),
                                          "labels": LABELS.tolist()}).status_code == 200
    fitted = demo.post("/v1/calibrators/example/versions", json={"method": "temperature", "logits": EXAMPLE_LOGITS,
                                                                 "labels": EXAMPLE_LABELS})
    assert fitted.status_code == 201, fitted.text


def test_the_calibrated_probabilities_with_the_check_off_are_the_cores(demo):
    """``input_check: false`` changes nothing but the check: the rows are calibrated as logits."""
    response = demo.post("/v1/calibrators/demo/calibrate", json={"logits": PROBABILITIES[:5].tolist(),
                                                                 "input_check": False})
    local = cal.create("temperature").fit(LOGITS, LABELS)
    assert np.array_equal(np.array(response.json()["probabilities"]), local.predict_proba(PROBABILITIES[:5]))


def test_binary_bodies_take_the_option_as_a_query_parameter(demo):
    buffer = io.BytesIO()
    np.save(buffer, PROBABILITIES)
    headers = {"content-type": "application/x-npy"}
    refused = demo.post("/v1/calibrators/demo/calibrate", content=buffer.getvalue(), headers=headers)
    assert refused.status_code == 422 and refused.json()["detail"] == DETAIL
    accepted = demo.post("/v1/calibrators/demo/calibrate?input_check=false", content=buffer.getvalue(),
                         headers=headers)
    assert accepted.status_code == 200, accepted.text


def _infer(client, data: np.ndarray, **parameters):
    tensor = {"name": "logits", "shape": list(data.shape), "datatype": "FP64", "data": data.ravel().tolist()}
    body = {"inputs": [tensor]}
    if parameters:
        body["parameters"] = parameters
    return client.post("/v2/models/demo/infer", json=body)


def test_v2_inference_refuses_them_unless_the_request_parameter_is_false(demo):
    refused = _infer(demo, PROBABILITIES[:4])
    assert refused.status_code == 400 and refused.json() == {"error": V2_DETAIL}
    accepted = _infer(demo, PROBABILITIES[:4], input_check=False)
    assert accepted.status_code == 200, accepted.text
    local = cal.create("temperature").fit(LOGITS, LABELS).predict_proba(PROBABILITIES[:4])
    assert np.allclose(accepted.json()["outputs"][0]["data"], local.astype(np.float32).ravel())
    assert _infer(demo, LOGITS[:4]).status_code == 200
    wrong = _infer(demo, PROBABILITIES[:4], input_check="no")
    assert wrong.status_code == 400
    assert wrong.json() == {"error": "parameter 'input_check' must be true or false, got 'no'"}


def test_the_option_is_in_the_openapi_document(client):
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/calibrators/{name}/versions", "/v1/calibrators/{ref}/calibrate",
                 "/v1/calibrators/{name}/versions/{version}/report", "/v1/metrics", "/v1/compare"):
        schema = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert schema["properties"]["input_check"] == {
            "type": "boolean", "default": True, "title": "Input Check",
            "description": "Refuse logits that look like probabilities (every row non-negative and summing to 1 "
                           "within 1e-6) with a 422; false sends them as logits anyway"}, path
