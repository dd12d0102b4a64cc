"""Answers in the question's precision: a float32 (or float16) ``.npy`` or ``/v2`` binary tensor
gets float32 probabilities, computed in float64 by the core and cast once; ``?dtype=float64``
(or ``float32``) asks for the other. JSON answers stay float64 unless ``dtype`` asks."""

from __future__ import annotations

import io

import numpy as np
import orjson
import pytest

import calibration as cal
from tests.helpers import load_split

KIND, X_VAL, Y_VAL = load_split("cifar10_resnet50_cross_entropy", "val")
_, X_TEST, _ = load_split("cifar10_resnet50_cross_entropy", "test")
NPY = {"content-type": "application/x-npy", "accept": "application/x-npy"}


def npy(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def read(content: bytes) -> np.ndarray:
    return np.load(io.BytesIO(content), allow_pickle=False)


@pytest.fixture
def fitted(client):
    body = {"method": "temperature", "logits": X_VAL[:500].tolist(), "labels": Y_VAL[:500].tolist()}
    assert client.post("/v1/calibrators/resnet/versions", json=body).status_code == 201
    return cal.create("temperature").fit(X_VAL[:500].astype(np.float64), Y_VAL[:500])


@pytest.mark.parametrize("path", ["/v1/calibrators/resnet/calibrate", "/v1/calibrators/resnet/versions/1/calibrate"])
def test_float32_npy_gets_a_float32_answer_and_float64_on_request(client, fitted, path):
    batch = X_TEST[:256].astype(np.float32)
    exact = fitted.predict_proba(batch.astype(np.float64))  # the float64 path

    answer = client.post(path, content=npy(batch), headers=NPY)
    assert answer.status_code == 200, answer.text
    probabilities = read(answer.content)
    assert probabilities.dtype == np.float32 and probabilities.shape == (256, 10)
    assert np.array_equal(probabilities, exact.astype(np.float32))  # computed in float64, cast once
    assert np.max(np.abs(probabilities - exact)) <= 1e-6
    assert len(answer.content) == 128 + batch.nbytes  # half the bytes of a float64 answer

    wide = client.post(f"{path}?dtype=float64", content=npy(batch), headers=NPY)
    assert wide.status_code == 200, wide.text
    assert read(wide.content).dtype == np.float64 and np.array_equal(read(wide.content), exact)


def test_float16_npy_answers_float32_and_float64_npy_answers_float64(client, fitted):
    half = X_TEST[:64].astype(np.float16)
    answer = read(client.post("/v1/calibrators/resnet/calibrate", content=npy(half), headers=NPY).content)
    assert answer.dtype == np.float32
    assert np.array_equal(answer, fitted.predict_proba(half.astype(np.float64)).astype(np.float32))

    double = X_TEST[:64].astype(np.float64)
    answer = read(client.post("/v1/calibrators/resnet/calibrate", content=npy(double), headers=NPY).content)
    assert answer.dtype == np.float64 and np.array_equal(answer, fitted.predict_proba(double))
    narrow = client.post("/v1/calibrators/resnet/calibrate?dtype=float32", content=npy(double), headers=NPY)
    assert read(narrow.content).dtype == np.float32
    assert np.array_equal(read(narrow.content), fitted.predict_proba(double).astype(np.float32))


def test_float32_npz_answers_float32(client, fitted):
    buffer = io.BytesIO()
    batch = X_TEST[:64].astype(np.float32)
    np.savez(buffer, logits=batch)
    answer = client.post("/v1/calibrators/resnet/calibrate", content=buffer.getvalue(),
                         headers={"content-type": "application/x-npz", "accept": "application/x-npy"})
    assert answer.status_code == 200, answer.text
    assert np.array_equal(read(answer.content), fitted.predict_proba(batch.astype(np.float64)).astype(np.float32))


def test_json_answers_stay_float64_unless_dtype_asks(client, fitted):
    batch = X_TEST[:8].astype(np.float32)
    exact = fitted.predict_proba(batch.astype(np.float64))
    # a float32 .npy asked for a JSON answer: the numbers are float64's, as before
    as_json = client.post("/v1/calibrators/resnet/calibrate", content=npy(batch),
                          headers={"content-type": "application/x-npy", "accept": "application/json"}).json()
    assert np.array_equal(np.asarray(as_json["probabilities"]), exact)
    asked = client.post("/v1/calibrators/resnet/calibrate",
                        json={"logits": batch.tolist(), "dtype": "float32"}).json()
    assert np.array_equal(np.asarray(asked["probabilities"], dtype=np.float32), exact.astype(np.float32))


def test_an_unknown_dtype_is_a_422_naming_it(client, fitted):
    answer = client.post("/v1/calibrators/resnet/calibrate?dtype=float16", content=npy(X_TEST[:4]), headers=NPY)
    assert answer.status_code == 422 and "dtype" in answer.json()["detail"]


def _infer(client, batch: np.ndarray, datatype: str, query: str = ""):
    header = orjson.dumps({"inputs": [{"name": "logits", "shape": list(batch.shape), "datatype": datatype,
                                       "parameters": {"binary_data_size": batch.nbytes}}],
                           "parameters": {"binary_data_output": True}})
    answer = client.post(f"/v2/models/resnet/infer{query}", content=header + batch.tobytes(),
                         headers={"inference-header-content-length": str(len(header))})
    assert answer.status_code == 200, answer.text
    length = int(answer.headers["inference-header-content-length"])
    output = orjson.loads(answer.content[:length])["outputs"][0]
    dtype = {"FP32": np.float32, "FP64": np.float64}[output["datatype"]]
    return output["datatype"], np.frombuffer(answer.content[length:], dtype=dtype).reshape(output["shape"])


def test_v2_binary_fp32_in_fp32_out_and_fp64_on_request(client, fitted):
    batch = X_TEST[:128].astype(np.float32)
    exact = fitted.predict_proba(batch.astype(np.float64))
    datatype, probabilities = _infer(client, batch, "FP32")
    assert datatype == "FP32" and np.array_equal(probabilities, exact.astype(np.float32))
    assert np.max(np.abs(probabilities - exact)) <= 1e-6
    datatype, probabilities = _infer(client, batch, "FP32", "?dtype=float64")
    assert datatype == "FP64" and np.array_equal(probabilities, exact)
    datatype, probabilities = _infer(client, batch.astype(np.float64), "FP64", "?dtype=float32")
    assert datatype == "FP32" and np.array_equal(probabilities, exact.astype(np.float32))


def test_v2_unknown_dtype_is_a_400(client, fitted):
    header = orjson.dumps({"inputs": [{"name": "logits", "shape": [1, 10], "datatype": "FP32",
                                       "data": [X_TEST[0].tolist()]}]})
    answer = client.post("/v2/models/resnet/infer?dtype=FP16", content=header)
    assert answer.status_code == 400 and "dtype" in answer.json()["error"]


def test_the_openapi_document_says_how_to_ask_for_a_precision(client):
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/calibrators/{ref}/calibrate", "/v1/calibrators/{name}/versions/{version}/calibrate",
                 "/v2/models/{name}/infer", "/v2/models/{name}/versions/{version}/infer"):
        operation = paths[path]["post"]
        (dtype,) = [p for p in operation["parameters"] if p["name"] == "dtype"]
        assert dtype["in"] == "query" and dtype["schema"]["enum"] == ["float32", "float64"]
        assert "float64" in dtype["description"]
    calibrate = paths["/v1/calibrators/{ref}/calibrate"]["post"]
    assert "float32" in calibrate["responses"]["200"]["description"]
    schema = calibrate["requestBody"]["content"]["application/json"]["schema"]
    assert "dtype" in schema["properties"]
