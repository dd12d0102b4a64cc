"""Reading an Open Inference Protocol (KServe v2 / Triton REST) inference request: the JSON header,
its one input tensor as JSON ``data`` (nested or flat, row-major) or as binary data after the header
(``Inference-Header-Content-Length``, ``binary_data_size``), the requested outputs and the request
parameters (``binary_data_output``, ``input_check``, ``ids``). Every field is checked before any
array is built, and a field that is wrong is named in a 400 (``MalformedRequest``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..platform.errors import MalformedRequest, TooLarge
from ..wire.codecs import parse_json
from ..wire.costs import RequestLimits

HEADER_LENGTH = "inference-header-content-length"
DTYPES: dict[str, np.dtype] = {"FP16": np.dtype("<f2"), "FP32": np.dtype("<f4"), "FP64": np.dtype("<f8")}


def bad(detail: str) -> MalformedRequest:
    return MalformedRequest(detail)


INT64_MAX = 2**63 - 1
MAX_DIMENSIONS = 2  # a calibrator takes [n] (binary scores) or [n, k]


SET_OUTPUT = "set"  # the conformal prediction sets' output name

@dataclass
class RequestedOutput:
    name: str
    binary: bool | None  # None: as the request's binary_data_output says


@dataclass
class InferenceRequest:
    id: str | None
    input_name: str
    datatype: str
    array: np.ndarray
    outputs: list[RequestedOutput] | None
    binary_default: bool
    input_check: bool = True
    ids: list[str] | None = None  # prediction ids (request parameter ``ids``), for the prediction log
    coverage: float | None = None  # the level of the ``set`` output (request parameter ``coverage``)
    set_predictor: int | None = None  # the set predictor of the ``set`` output (request parameter)

    def wants_sets(self) -> bool:
        return any(spec.name == SET_OUTPUT for spec in self.outputs or [])


def short(value) -> str:
    """``repr(value)``, cut to 80 characters: messages never echo a huge field back."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _parameters(value, where: str) -> dict:
    """A ``parameters`` field: absent or null is empty, anything but an object is refused."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad(f"{where}'parameters' must be an object, got {short(value)}")
    return value


def _flag(parameters: dict, key: str, default: bool, where: str) -> bool:
    value = parameters.get(key, default)
    if not isinstance(value, bool):
        raise bad(f"{where}parameter {key!r} must be true or false, got {short(value)}")
    return value


def _header_length(header_length: str, body_length: int) -> int:
    if not (header_length.isascii() and header_length.isdigit()) or len(header_length) > 18:
        raise bad(f"Inference-Header-Content-Length must be a non-negative integer, got {short(header_length)}")
    length = int(header_length)
    if not 0 < length <= body_length:
        raise bad(f"Inference-Header-Content-Length {length} does not fit a body of {body_length} bytes")
    return length


def _shape(value, name: str) -> tuple[tuple[int, ...], int]:
    """The shape and its number of elements (exact: the product of Python ints)."""
    if not isinstance(value, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in value):
        raise bad(f"input {name!r}: 'shape' must be a list of non-negative integers")
    if not 1 <= len(value) <= MAX_DIMENSIONS:
        raise bad(f"input {name!r}: 'shape' must have 1 or 2 dimensions ([-1] for binary scores, [-1, k] "
                  f"otherwise), got {short(value)}")
    size = math.prod(value)
    if size > INT64_MAX:
        raise bad(f"input {name!r}: shape {value} has {size} elements, beyond the int64 range")
    return tuple(value), size


def _json_data(data, name: str, shape: tuple[int, ...], size: int, datatype: str) -> np.ndarray:
    """JSON ``data`` (nested or flat, row-major) as an array of ``datatype``: numbers only
    (null is NaN, which the core refuses by row), and each representable in ``datatype``."""
    try:
        array = np.asarray(data)
    except (TypeError, ValueError) as exc:
        raise bad(f"input {name!r}: 'data' must be numbers (nested or flat): {exc}") from exc
    if array.dtype.kind == "O":
        if not all(v is None or type(v) in (int, float) for v in array.flat):
            raise bad(f"input {name!r}: 'data' must be numbers (nested or flat) or null")
        array = array.astype(np.float64)
    if array.dtype.kind not in "iuf":
        raise bad(f"input {name!r}: 'data' must be numbers (nested or flat), got "
                  f"{'booleans' if array.dtype.kind == 'b' else 'strings' if array.dtype.kind in 'US' else 'objects'}")
    if array.size != size:
        raise bad(f"input {name!r}: 'data' holds {array.size} values, shape {list(shape)} needs {size}")
    dtype = DTYPES[datatype]
    with np.errstate(over="ignore", invalid="ignore"):
        converted = array.reshape(shape).astype(dtype)
    lost = np.isinf(converted) & np.isfinite(array.reshape(shape))
    if lost.any():
        first = array.reshape(-1)[np.flatnonzero(lost.reshape(-1))[0]]
        raise bad(f"input {name!r}: {first.item()!r} is beyond the range of {datatype}")
    return converted


def _outputs(value) -> list[RequestedOutput] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(o, dict) for o in value):
        raise bad("'outputs' must be a list of objects")
    outputs = []
    for position, spec in enumerate(value):
        name = spec.get("name")
        if not isinstance(name, str):
            raise bad(f"output {position}: 'name' must be a string, got {short(name)}")
        where = f"output {short(name)}: "
        parameters = _parameters(spec.get("parameters"), where)
        binary = _flag(parameters, "binary_data", False, where) if "binary_data" in parameters else None
        outputs.append(RequestedOutput(name, binary))
    return outputs


def parse_request(body: bytes, header_length: str | None, limits: RequestLimits | None = None) -> InferenceRequest:
    """An inference request (JSON, or a JSON header and binary tensor data), every field
    checked: anything malformed is a 400 naming the field, never a 500; over the request budgets
    (``limits``: the JSON's bytes before it is parsed, the tensor's entries and bytes from its
    shape before its data is read) a 413."""
    if header_length is not None:
        length = _header_length(header_length, len(body))
        header, binary = body[:length], memoryview(body)[length:]
    else:
        header, binary = body, memoryview(b"")
    if limits is not None and len(header) > limits.json_bytes:
        raise TooLarge(f"the JSON of an inference request may be {limits.json_bytes} bytes at most "
                       f"(CALIBRATION_MAX_JSON_BYTES), got {len(header)}: send the tensor as binary data")
    request = parse_json(header)
    inputs = request.get("inputs")
    if not isinstance(inputs, list) or len(inputs) != 1 or not isinstance(inputs[0], dict):
        raise bad("a calibrator takes exactly one input tensor")
    tensor = inputs[0]
    name = tensor.get("name")
    if not isinstance(name, str):
        raise bad("the input tensor needs a 'name' string")
    label = name if len(name) <= 80 else name[:77] + "..."  # for messages
    datatype = tensor.get("datatype")
    if not isinstance(datatype, str) or datatype not in DTYPES:
        raise bad(f"input {label!r}: datatype must be one of {', '.join(DTYPES)}, got {short(datatype)}")
    shape, size = _shape(tensor.get("shape"), label)
    dtype = DTYPES[datatype]
    if limits is not None and (size > limits.entries or size * dtype.itemsize > limits.array_bytes):
        raise TooLarge(f"input {label!r}: shape {list(shape)} has {size} entries, over the limits of {limits.entries} "
                       f"entries and {limits.array_bytes} bytes per request (CALIBRATION_MAX_ENTRIES, "
                       "CALIBRATION_MAX_ARRAY_BYTES)")
    parameters = _parameters(tensor.get("parameters"), f"input {label!r}: ")
    if "binary_data_size" in parameters:
        declared = parameters["binary_data_size"]
        if not isinstance(declared, int) or isinstance(declared, bool) or declared < 0:
            raise bad(f"input {label!r}: binary_data_size must be a non-negative integer")
        if declared != len(binary):
            raise bad(f"input {label!r}: binary_data_size is {declared} but {len(binary)} bytes follow the header")
        if declared != size * dtype.itemsize:
            raise bad(f"input {label!r}: shape {list(shape)} of {datatype} needs {size * dtype.itemsize} bytes, "
                      f"binary_data_size is {declared}")
        if "data" in tensor:
            raise bad(f"input {label!r} has both 'data' and binary data")
        array = np.frombuffer(binary, dtype=dtype, count=size).reshape(shape)
    else:
        if len(binary):
            raise bad("binary data follows the header but no input declares binary_data_size")
        if "data" not in tensor:
            raise bad(f"input {label!r} has neither 'data' nor binary data")
        array = _json_data(tensor["data"], label, shape, size, datatype)
    outputs = _outputs(request.get("outputs"))
    request_parameters = _parameters(request.get("parameters"), "")
    request_id = request.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise bad("'id' must be a string")
    ids = request_parameters.get("ids")
    if ids is not None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
        raise bad("parameter 'ids' must be a list of prediction id strings")
    coverage = request_parameters.get("coverage")
    if coverage is not None and (type(coverage) not in (int, float) or not 0 < coverage < 1):
        raise bad(f"parameter 'coverage' must be a number in (0, 1), got {short(coverage)}")
    set_predictor = request_parameters.get("set_predictor")
    if set_predictor is not None and (type(set_predictor) is not int or not 0 < set_predictor < 2**31):
        raise bad(f"parameter 'set_predictor' must be a set predictor id (a positive integer), got "
                  f"{short(set_predictor)}")
    parsed = InferenceRequest(request_id, name, datatype, array, outputs,
                              _flag(request_parameters, "binary_data_output", False, ""),
                              _flag(request_parameters, "input_check", True, ""), ids,
                              None if coverage is None else float(coverage), set_predictor)
    if parsed.wants_sets() and parsed.coverage is None:
        raise bad("output 'set' needs the request parameter 'coverage' (a level the version's set predictor was "
                  "fitted at, e.g. 0.9)")
    if not parsed.wants_sets() and (coverage is not None or set_predictor is not None):
        raise bad("parameters 'coverage' and 'set_predictor' choose the prediction sets: ask for the output 'set'")
    return parsed
