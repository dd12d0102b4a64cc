"""The Open Inference Protocol (KServe v2 / Triton REST) for calibrators: tensor codecs with
the binary tensor data extension, and the inference call.

A calibrator name is a model name and its versions are model versions. Inputs are FP16, FP32 or
FP64, given as JSON ``data`` (nested or flat, row-major) or as binary data after the JSON header
(``Inference-Header-Content-Length``, ``binary_data_size`` per input). Outputs are the
probabilities (FP64 for FP64 input, else FP32), and on request the predicted class (INT64) and
the confidence; each is returned as JSON ``data`` or as binary data (``binary_data`` per output,
or ``binary_data_output`` for all).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import orjson

import calibration as cal

from .codecs import parse_json
from .errors import MalformedRequest

HEADER_LENGTH = "inference-header-content-length"
DTYPES = {"FP16": np.dtype("<f2"), "FP32": np.dtype("<f4"), "FP64": np.dtype("<f8")}
OUTPUT_DTYPES = {"FP64": np.dtype("<f8"), "FP32": np.dtype("<f4"), "INT64": np.dtype("<i8")}


def bad(detail: str) -> MalformedRequest:
    return MalformedRequest(detail)


@dataclass
class InferenceRequest:
    id: str | None
    input_name: str
    datatype: str
    array: np.ndarray
    outputs: list[dict] | None
    binary_default: bool


def _shape(value, name: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in value):
        raise bad(f"input {name!r}: 'shape' must be a list of non-negative integers")
    return tuple(value)


def parse_request(body: bytes, header_length: str | None) -> InferenceRequest:
    if header_length is not None:
        try:
            length = int(header_length)
        except ValueError as exc:
            raise bad("Inference-Header-Content-Length must be an integer") from exc
        if not 0 < length <= len(body):
            raise bad(f"Inference-Header-Content-Length {length} does not fit a body of {len(body)} bytes")
        header, binary = body[:length], memoryview(body)[length:]
    else:
        header, binary = body, memoryview(b"")
    request = parse_json(header)
    inputs = request.get("inputs")
    if not isinstance(inputs, list) or len(inputs) != 1 or not isinstance(inputs[0], dict):
        raise bad("a calibrator takes exactly one input tensor")
    tensor = inputs[0]
    name = tensor.get("name")
    if not isinstance(name, str):
        raise bad("the input tensor needs a 'name'")
    datatype = tensor.get("datatype")
    if datatype not in DTYPES:
        raise bad(f"input {name!r}: datatype must be one of {', '.join(DTYPES)}, got {datatype!r}")
    shape = _shape(tensor.get("shape"), name)
    dtype = DTYPES[datatype]
    size = int(np.prod(shape, dtype=np.int64))
    parameters = tensor.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise bad(f"input {name!r}: 'parameters' must be an object")
    if "binary_data_size" in parameters:
        declared = parameters["binary_data_size"]
        if not isinstance(declared, int) or isinstance(declared, bool) or declared < 0:
            raise bad(f"input {name!r}: binary_data_size must be a non-negative integer")
        if declared != len(binary):
            raise bad(f"input {name!r}: binary_data_size is {declared} but {len(binary)} bytes follow the header")
        if declared != size * dtype.itemsize:
            raise bad(f"input {name!r}: shape {list(shape)} of {datatype} needs {size * dtype.itemsize} bytes, "
                      f"binary_data_size is {declared}")
        array = np.frombuffer(binary, dtype=dtype, count=size).reshape(shape)
    else:
        if len(binary):
            raise bad("binary data follows the header but no input declares binary_data_size")
        if "data" not in tensor:
            raise bad(f"input {name!r} has neither 'data' nor binary data")
        try:
            array = np.asarray(tensor["data"], dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise bad(f"input {name!r}: 'data' must be numbers (nested or flat): {exc}") from exc
        if array.size != size:
            raise bad(f"input {name!r}: 'data' holds {array.size} values, shape {list(shape)} needs {size}")
        array = array.reshape(shape).astype(dtype)
    outputs = request.get("outputs")
    if outputs is not None and (not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs)):
        raise bad("'outputs' must be a list of objects")
    request_parameters = request.get("parameters") or {}
    if not isinstance(request_parameters, dict):
        raise bad("'parameters' must be an object")
    request_id = request.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise bad("'id' must be a string")
    return InferenceRequest(request_id, name, datatype, array, outputs,
                            bool(request_parameters.get("binary_data_output", False)))


def output_names(tensor_names: dict | None) -> dict[str, str]:
    names = tensor_names or {}
    return {kind: names.get(kind) or kind for kind in ("probabilities", "predicted_class", "confidence")}


def accepted_inputs(tensor_names: dict | None) -> list[str] | None:
    return (tensor_names or {}).get("inputs") or None


def infer(calibrator: cal.Calibrator, request: InferenceRequest, tensor_names: dict | None,
          model_name: str, model_version: int, predict=None) -> tuple[bytes, dict[str, str]]:
    """Run the calibrator (through ``predict(calibrator, scores)``, the service's device, when
    given) and encode the response (JSON, plus binary outputs if asked)."""
    allowed = accepted_inputs(tensor_names)
    if allowed and request.input_name not in allowed:
        raise bad(f"unknown input {request.input_name!r}; this model takes {', '.join(allowed)}")
    expected_ndim = 1 if calibrator.input == "scores" else 2
    if request.array.ndim != expected_ndim:
        expected = "[-1]" if expected_ndim == 1 else f"[-1, {calibrator.n_classes_}]"
        raise bad(f"input {request.input_name!r}: expected shape {expected}, got {list(request.array.shape)}")
    try:
        scores = cal.to_scores(request.array, calibrator.input, request.input_name)
        probabilities = predict(calibrator, scores) if predict else calibrator.predict_scores(scores)
    except ValueError as exc:
        raise bad(str(exc)) from exc
    names = output_names(tensor_names)
    by_name = {name: kind for kind, name in names.items()}
    wanted = request.outputs if request.outputs else [{"name": names["probabilities"]}]
    probability_type = "FP64" if request.datatype == "FP64" else "FP32"
    outputs, binary = [], []
    for spec in wanted:
        kind = by_name.get(spec.get("name"))
        if kind is None:
            raise bad(f"unknown output {spec.get('name')!r}; outputs are {', '.join(names.values())}")
        if kind == "probabilities":
            value, datatype = probabilities, probability_type
        elif kind == "predicted_class":
            value, datatype = cal.predicted_class(probabilities, getattr(scores, scores.source)), "INT64"
        else:
            value, datatype = probabilities.max(axis=1), probability_type
        value = np.ascontiguousarray(value, dtype=OUTPUT_DTYPES[datatype])
        entry = {"name": spec["name"], "datatype": datatype, "shape": list(value.shape)}
        parameters = spec.get("parameters") or {}
        if parameters.get("binary_data", request.binary_default):
            data = value.tobytes()
            entry["parameters"] = {"binary_data_size": len(data)}
            binary.append(data)
        else:
            entry["data"] = value.ravel()
        outputs.append(entry)
    response = {"model_name": model_name, "model_version": str(model_version), "outputs": outputs}
    if request.id is not None:
        response["id"] = request.id
    header = orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY)
    if not binary:
        return header, {"content-type": "application/json"}
    return header + b"".join(binary), {"content-type": "application/octet-stream",
                                       "inference-header-content-length": str(len(header))}


def model_metadata(name: str, versions: list[int], method: str, input_kind: str, n_classes: int,
                   tensor_names: dict | None) -> dict:
    allowed = accepted_inputs(tensor_names)
    input_shape = [-1] if input_kind == "scores" else [-1, n_classes]
    names = output_names(tensor_names)
    return {
        "name": name,
        "versions": [str(v) for v in versions],
        "platform": f"calibration_{method}",
        "inputs": [{"name": allowed[0] if allowed else input_kind, "datatype": "FP32", "shape": input_shape}],
        "outputs": [
            {"name": names["probabilities"], "datatype": "FP32", "shape": [-1, n_classes]},
            {"name": names["predicted_class"], "datatype": "INT64", "shape": [-1]},
            {"name": names["confidence"], "datatype": "FP32", "shape": [-1]},
        ],
    }
