"""Random /v2 inference bodies against a real app: whatever the structure of ``inputs``,
``outputs``, ``parameters``, ``shape``, ``datatype`` and ``data`` (and binary data after the
JSON header), the answer is never a 5xx, a 4xx is always the protocol's ``{"error": "..."}``
and a 200 is a well-formed inference response."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from app.main import create_app
from app.platform.migrate import upgrade
from app.settings import Settings

L = [[2.0, 0.5, -1.0], [0.1, 1.5, 0.3], [-0.5, 0.2, 2.2], [1.0, 1.1, 0.9]]
S = [2.0, -1.0, 0.5, -0.3, 1.5, -2.0]
MODELS = ["/v2/models/demo/infer", "/v2/models/demo/versions/1/infer", "/v2/models/binary/infer",
          "/v2/models/named/infer"]
KEYS = st.sampled_from(["name", "shape", "datatype", "data", "parameters", "binary_data_size", "binary_data",
                        "binary_data_output", "input_check", "id", "inputs", "outputs", "x"])
SCALARS = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6))
ANY_JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(KEYS | st.text(max_size=4), inner, max_size=3), max_leaves=12)
DATATYPES = st.sampled_from(["FP16", "FP32", "FP64", "INT64", "BYTES", "fp32", ""]) | ANY_JSON
DIMENSION = st.integers(0, 4) | st.integers(-3, 2**64 - 1) | st.sampled_from([2**31, 2**32 + 3, 2**62, 2**63 - 1])
SHAPES = st.lists(DIMENSION, max_size=4) | ANY_JSON
PARAMETERS = (st.dictionaries(st.sampled_from(["binary_data_size", "binary_data", "binary_data_output",
                                                "input_check", "other"]), SCALARS | ANY_JSON, max_size=3)
              | ANY_JSON)
OUTPUT_NAMES = st.sampled_from(["probabilities", "predicted_class", "confidence", "calibrated", "nope"]) | ANY_JSON
OUTPUTS = st.lists(st.fixed_dictionaries({}, optional={"name": OUTPUT_NAMES, "parameters": PARAMETERS}),
                   max_size=3) | ANY_JSON


PLAUSIBLE_OUTPUTS = st.lists(st.fixed_dictionaries(
    {"name": st.sampled_from(["probabilities", "predicted_class", "confidence", "calibrated"])},
    optional={"parameters": st.fixed_dictionaries({}, optional={"binary_data": st.booleans()})}), max_size=3)
PLAUSIBLE_PARAMETERS = st.fixed_dictionaries({}, optional={"binary_data_output": st.booleans(),
                                                           "input_check": st.booleans()})
VALUES = st.floats(-50, 50) | st.floats(-50, 50) | st.floats(allow_nan=False) | st.none() | st.integers(-10, 10)
TENSOR_JUNK = {"name": st.sampled_from(["logits", "scores", "upstream", "x"]) | ANY_JSON, "shape": SHAPES,
               "datatype": DATATYPES, "data": ANY_JSON | st.lists(VALUES, max_size=13), "parameters": PARAMETERS}
BODY_JUNK = {"inputs": st.lists(ANY_JSON, max_size=3) | ANY_JSON, "outputs": OUTPUTS, "parameters": PARAMETERS,
             "id": ANY_JSON}


@st.composite
def cases(draw) -> tuple[str, dict]:
    """A model's path and a request for it: first a valid one (a tensor of the model's input
    name and shape, data flat or nested, outputs, parameters, an id), then up to three of its
    fields swapped for random JSON; one in ten is random JSON throughout."""
    path = draw(st.sampled_from(MODELS))
    if draw(st.integers(0, 9)) == 0:
        return path, draw(ANY_JSON)
    binary = "binary" in path
    n = draw(st.integers(1, 3))
    values = draw(st.lists(st.floats(-50, 50) | st.integers(-10, 10), min_size=n * (1 if binary else 3),
                           max_size=n * (1 if binary else 3)))
    nested = not binary and draw(st.booleans())
    tensor = {"name": "upstream" if "named" in path else "scores" if binary else "logits",
              "shape": [n] if binary else [n, 3], "datatype": draw(st.sampled_from(["FP16", "FP32", "FP64"])),
              "data": [values[i * 3:(i + 1) * 3] for i in range(n)] if nested else values}
    body = {"inputs": [tensor]}
    for key, strategy in (("outputs", PLAUSIBLE_OUTPUTS), ("parameters", PLAUSIBLE_PARAMETERS),
                          ("id", st.text(max_size=5))):
        if draw(st.booleans()):
            body[key] = draw(strategy)
    for key in draw(st.lists(st.sampled_from([*TENSOR_JUNK, *BODY_JUNK, "drop"]), max_size=3)):
        if key == "drop":
            tensor.pop(draw(st.sampled_from(sorted(TENSOR_JUNK))), None)
        elif key in TENSOR_JUNK:
            tensor[key] = draw(TENSOR_JUNK[key])
        else:
            body[key] = draw(BODY_JUNK[key])
    return path, body


@st.composite
def binary_cases(draw) -> tuple[str, dict, bytes]:
    """As ``cases``, the tensor's values sent as binary data after the JSON header (often
    consistently; else with the declared size, the bytes or the header's data mutated)."""
    path, body = draw(cases())
    tensor = body["inputs"][0] if isinstance(body, dict) and isinstance(body.get("inputs"), list) \
        and body["inputs"] and isinstance(body["inputs"][0], dict) else {}
    values = tensor.pop("data", None)
    binary = b""
    if tensor.get("datatype") in ("FP16", "FP32", "FP64") and isinstance(values, list):
        try:
            binary = np.asarray(values, dtype={"FP16": "<f2", "FP32": "<f4", "FP64": "<f8"}[tensor["datatype"]]
                                ).tobytes()
        except (TypeError, ValueError, OverflowError):
            binary = b""
        tensor["parameters"] = {"binary_data_size": len(binary)}
    mutation = draw(st.sampled_from(["none", "none", "none", "size", "bytes", "data"]))
    if mutation == "size" and isinstance(tensor.get("parameters"), dict):
        tensor["parameters"]["binary_data_size"] = draw(ANY_JSON | st.integers(-3, 100))
    elif mutation == "bytes":
        binary = draw(st.binary(max_size=64))
    elif mutation == "data":
        tensor["data"] = values
    return path, body, binary


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('v2fuzz') / 'fuzz.db'}"
    upgrade(url)
    with TestClient(create_app(Settings(database_url=url)), raise_server_exceptions=False) as test_client:
        fits = [("demo", {"method": "temperature", "logits": L, "labels": [0, 1, 2, 0]}),
                ("binary", {"method": "platt", "scores": S, "labels": [1, 0, 1, 0, 1, 0]}),
                ("named", {"method": "temperature", "logits": L, "labels": [0, 1, 2, 0],
                           "tensor_names": {"inputs": ["upstream"], "probabilities": "calibrated"}})]
        for name, body in fits:
            assert test_client.post(f"/v1/calibrators/{name}/versions", json=body).status_code == 201
        yield test_client


def _check(response) -> None:
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert response.headers["content-type"] == "application/json", response.headers
        body = response.json()
        assert isinstance(body, dict) and list(body) == ["error"] and isinstance(body["error"], str), body
        assert body["error"]
        return
    assert response.status_code == 200
    header = response.content
    if response.headers["content-type"] == "application/octet-stream":
        length = int(response.headers["inference-header-content-length"])
        header = response.content[:length]
    payload = orjson.loads(header)
    assert set(payload) <= {"model_name", "model_version", "outputs", "id"}
    for output in payload["outputs"]:
        assert output["datatype"] in ("FP32", "FP64", "INT64")
        assert all(isinstance(d, int) and d >= 0 for d in output["shape"])
        if "data" in output:
            assert len(output["data"]) == int(np.prod(output["shape"]))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_random_json_bodies_are_never_a_server_error(client, case):
    path, body = case
    _check(client.post(path, content=orjson.dumps(body), headers={"content-type": "application/json"}))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(case=binary_cases(),
       declared=st.none() | st.integers(-5, 200) | st.sampled_from(["", " 7", "+7", "\u00b2", "7.0", "0x10"]))
def test_random_bodies_with_binary_data_are_never_a_server_error(client, case, declared):
    path, body, binary = case
    header = orjson.dumps(body)
    length = (str(len(header)) if declared is None else str(declared)).encode("latin-1")
    _check(client.post(path, content=header + binary, headers={"inference-header-content-length": length}))
