"""The Open Inference Protocol (/v2) against a live server, driven by the real tritonclient."""

from __future__ import annotations

import httpx
import numpy as np
import orjson
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

import calibration as cal
from tests.helpers import load_split
from tests.service.support.databases import copy_sqlite_database
from tests.service.support.live import live_server

# one client for this module's plain calls, keeping no connection between them (a fresh connection
# each, as ``httpx.get`` and co make): those build a client and its SSL context (a CA bundle read, ~35 ms
# of CPU) every call
HTTP = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))

KIND, X_VAL, Y_VAL = load_split("cifar10_resnet50_cross_entropy", "val")
_, X_TEST, _ = load_split("cifar10_resnet50_cross_entropy", "test")
BATCH = X_TEST[:64]


@pytest.fixture(scope="module")
def server(tmp_path_factory, sqlite_head):
    url = copy_sqlite_database(sqlite_head, tmp_path_factory.mktemp("v2") / "v2.db")
    with live_server(url, migrated=True) as base:
        fits = [("resnet", "temperature", None), ("resnet", "ensemble_temperature", None),
                ("named", "temperature", {"inputs": ["upstream_output"], "probabilities": "calibrated"})]
        for name, method, tensor_names in fits:
            body = {"method": method, KIND: X_VAL.tolist(), "labels": Y_VAL.tolist()}
            if tensor_names:
                body["tensor_names"] = tensor_names
            assert HTTP.post(f"{base}/v1/calibrators/{name}/versions", json=body, timeout=60).status_code == 201
        yield base


@pytest.fixture(scope="module")
def client(server):
    return triton.InferenceServerClient(url=server.removeprefix("http://"))


def local(method: str, x: np.ndarray) -> np.ndarray:
    return cal.create(method).fit(X_VAL, Y_VAL).predict_proba(x)


def _input(array: np.ndarray, datatype: str, binary: bool, name: str = "logits") -> triton.InferInput:
    tensor = triton.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def test_health_and_server_metadata_have_the_protocol_shapes(client, server):
    assert client.is_server_live() and client.is_server_ready()
    metadata = client.get_server_metadata()
    assert set(metadata) == {"name", "version", "extensions"}
    assert "binary_tensor_data" in metadata["extensions"]
    assert HTTP.get(f"{server}/v2/").json() == metadata


def test_model_metadata_has_the_protocol_shapes(client):
    metadata = client.get_model_metadata("resnet")
    # $metadata_model_response = {name, versions, platform, inputs: [$metadata_tensor], outputs: [...]}
    assert set(metadata) == {"name", "versions", "platform", "inputs", "outputs"}
    assert metadata["versions"] == ["1", "2"] and metadata["platform"] == "calibration_ensemble_temperature"
    for tensor in metadata["inputs"] + metadata["outputs"]:
        assert set(tensor) == {"name", "datatype", "shape"}
    assert metadata["inputs"] == [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}]
    assert [o["name"] for o in metadata["outputs"]] == ["probabilities", "predicted_class", "confidence"]
    pinned = client.get_model_metadata("resnet", model_version="1")
    assert pinned["versions"] == ["1"] and pinned["platform"] == "calibration_temperature"
    assert client.is_model_ready("resnet") and client.is_model_ready("resnet", "2")
    assert not client.is_model_ready("nope")


def test_binary_fp32_in_and_out_is_the_default(client):
    x = BATCH.astype(np.float32)
    result = client.infer("resnet", [_input(x, "FP32", True)],
                          outputs=[triton.InferRequestedOutput("probabilities", binary_data=True)],
                          request_id="req-7")
    probabilities = result.as_numpy("probabilities")
    assert probabilities.dtype == np.float32
    assert np.array_equal(probabilities, local("ensemble_temperature", x).astype(np.float32))
    response = result.get_response()
    assert response["id"] == "req-7" and response["model_version"] == "2" and response["model_name"] == "resnet"


def test_json_fp64_pinned_version_is_exact(client):
    x = BATCH.astype(np.float64)
    result = client.infer("resnet", [_input(x, "FP64", False)], model_version="1",
                          outputs=[triton.InferRequestedOutput("probabilities", binary_data=False)])
    assert np.array_equal(result.as_numpy("probabilities"), local("temperature", x))
    assert result.get_response()["model_version"] == "1"


def test_requested_outputs_mixed_binary_and_json(client):
    x = BATCH.astype(np.float64)
    outputs = [triton.InferRequestedOutput("predicted_class", binary_data=True),
               triton.InferRequestedOutput("confidence", binary_data=False)]
    result = client.infer("resnet", [_input(x, "FP64", True)], model_version="1", outputs=outputs)
    expected = local("temperature", x)
    assert np.array_equal(result.as_numpy("predicted_class"), x.argmax(axis=1))
    assert np.array_equal(result.as_numpy("confidence"), expected.max(axis=1))
    assert result.as_numpy("probabilities") is None


def test_fp16_and_custom_tensor_names(client):
    x = BATCH.astype(np.float16)
    result = client.infer("named", [_input(x, "FP16", True, name="upstream_output")],
                          outputs=[triton.InferRequestedOutput("calibrated")])
    assert np.array_equal(result.as_numpy("calibrated"), local("temperature", x).astype(np.float32))
    with pytest.raises(InferenceServerException, match="unknown input 'logits'"):
        client.infer("named", [_input(x, "FP16", True)])


def test_probabilities_sent_as_logits_are_refused_unless_input_check_is_false(client):
    """The real client's request ``parameters`` reach the check: softmax outputs sent as the
    logits input are a 400 with the reason, and served as logits with ``input_check: false``."""
    probabilities = cal.softmax(BATCH.astype(np.float64)).astype(np.float32)
    with pytest.raises(InferenceServerException, match="these look like probabilities; send them as `probabilities`"):
        client.infer("resnet", [_input(probabilities, "FP32", True)])
    result = client.infer("resnet", [_input(probabilities, "FP32", True)], parameters={"input_check": False})
    assert np.array_equal(result.as_numpy("probabilities"),
                          local("ensemble_temperature", probabilities).astype(np.float32))


def _raw_infer(server, header: dict, binary: bytes = b"", declared: int | None = None):
    head = orjson.dumps(header)
    length = len(head) if declared is None else declared
    return HTTP.post(f"{server}/v2/models/resnet/infer", content=head + binary,
                      headers={"Inference-Header-Content-Length": str(length)})


@pytest.mark.parametrize(
    ("header", "binary", "declared", "message"),
    [
        ({"inputs": [{"name": "x", "shape": [2, 10], "datatype": "FP32", "parameters": {"binary_data_size": 80}}]},
         b"\0" * 40, None, "binary_data_size is 80 but 40 bytes follow"),
        ({"inputs": [{"name": "x", "shape": [2, 10], "datatype": "FP32", "parameters": {"binary_data_size": 40}}]},
         b"\0" * 40, None, "needs 80 bytes"),
        ({"inputs": [{"name": "x", "shape": [1, 10], "datatype": "FP32", "data": [1.0] * 10}]}, b"", 10_000,
         "does not fit a body"),
        ({"inputs": [{"name": "x", "shape": [2, 10], "datatype": "FP32", "data": [1.0] * 10}]}, b"", None,
         "holds 10 values"),
        ({"inputs": [{"name": "x", "shape": [1, 10], "datatype": "INT8", "data": [1] * 10}]}, b"", None,
         "datatype must be one of"),
        ({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}, b"", None,
         "fitted on 10 classes"),
        ({"inputs": []}, b"", None, "exactly one input"),
    ],
)
def test_malformed_requests_are_400_with_an_error_field(server, header, binary, declared, message):
    response = _raw_infer(server, header, binary, declared)
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]


def test_unknown_model_is_404_with_an_error_field(server):
    response = HTTP.post(f"{server}/v2/models/nope/infer", json={"inputs": []})
    assert response.status_code == 404 and "nope" in response.json()["error"]
    response = HTTP.get(f"{server}/v2/models/nope")
    assert response.status_code == 404 and "error" in response.json()
