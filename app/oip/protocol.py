"""The Open Inference Protocol (KServe v2 / Triton REST) for calibrators: the inference call, its
answer (JSON or with the binary tensor data extension) and model metadata; requests are read by
``app.oip.requests``.

A calibrator name is a model name and its versions are model versions. Inputs are FP16, FP32 or
FP64, given as JSON ``data`` (nested or flat, row-major) or as binary data after the JSON header
(``Inference-Header-Content-Length``, ``binary_data_size`` per input). Outputs are the
probabilities (FP64 for FP64 input, else FP32, or as the query parameter ``dtype`` asks; computed
in float64, only the answer is cast), and on request the predicted class (INT64) and the
confidence, and the conformal prediction set (output ``set``, BOOL ``[n, k]``: class ``j`` is in row
``i``'s set; the request parameter ``coverage`` picks the level, ``set_predictor`` a set predictor by
id); each as JSON ``data`` or binary data (``binary_data`` per output, or
``binary_data_output`` for all), sent from the outputs' own buffers after the JSON header. Logits
that look like probabilities (rows non-negative, summing to 1) are refused unless the request
parameter ``input_check`` is false.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

import calibration as cal

from ..platform.errors import refused_as
from .requests import HEADER_LENGTH, SET_OUTPUT, InferenceRequest, RequestedOutput, bad, parse_request, short

__all__ = ["HEADER_LENGTH", "InferenceRequest", "accepted_inputs", "answer_datatype", "bad", "infer",
           "model_metadata", "output_names", "parse_request"]

OUTPUT_DTYPES: dict[str, np.dtype] = {"FP64": np.dtype("<f8"), "FP32": np.dtype("<f4"), "INT64": np.dtype("<i8"),
                                      "BOOL": np.dtype("?")}
ANSWER_DATATYPES = {"float32": "FP32", "float64": "FP64"}  # the query parameter ``dtype``
LOOKS_LIKE_PROBABILITIES = ("these look like probabilities; send them as `probabilities` (every row of the logits "
                            "is non-negative and sums to 1, and this model was fitted on logits; set the request "
                            "parameter input_check to false if they really are logits)")


def answer_datatype(dtype: str | None, input_datatype: str) -> str:
    """The probabilities' datatype: as ``dtype`` asks, else FP64 for FP64 input, FP32 otherwise."""
    if dtype is None:
        return "FP64" if input_datatype == "FP64" else "FP32"
    if dtype not in ANSWER_DATATYPES:
        raise bad(f"query parameter 'dtype' must be float32 or float64, got {short(dtype)}")
    return ANSWER_DATATYPES[dtype]


def output_names(tensor_names: dict | None) -> dict[str, str]:
    names = tensor_names or {}
    return {kind: names.get(kind) or kind for kind in ("probabilities", "predicted_class", "confidence")}


def accepted_inputs(tensor_names: dict | None) -> list[str] | None:
    return (tensor_names or {}).get("inputs") or None


def infer(calibrator: cal.Calibrator, request: InferenceRequest, tensor_names: dict | None,
          model_name: str, model_version: int, predict=None, log=None,
          dtype: str | None = None, sets=None) -> tuple[list[bytes | memoryview], dict[str, str]]:
    """Run the calibrator (through ``predict(calibrator, scores)``, the service's device, when
    given) and encode the response: the JSON header, then the binary outputs if asked, as parts
    to send one after another (``answer_datatype`` says the probabilities' datatype from
    ``dtype``). ``log(array, ids)`` hands
    the input to the prediction log and returns what it did (``app.wire.batches.Served``), or
    ``None`` when the calibrator does not log; with logging on the response's ``parameters`` carry
    ``ids`` and ``logged``. ``sets``, given when the request asks for the output ``set``, is
    ``(set predictor id, probabilities -> boolean mask)``."""
    allowed = accepted_inputs(tensor_names)
    if allowed and request.input_name not in allowed:
        raise bad(f"unknown input {short(request.input_name)}; this model takes {', '.join(allowed)}")
    expected_ndim = 1 if calibrator.input == "scores" else 2
    if request.array.ndim != expected_ndim:
        expected = "[-1]" if expected_ndim == 1 else f"[-1, {calibrator.n_classes_}]"
        raise bad(f"input {short(request.input_name)}: expected shape {expected}, got {list(request.array.shape)}")
    with refused_as(bad):
        scores = cal.validate_inputs(request.array, calibrator.input, request.input_name)
    if calibrator.input == "logits" and request.input_check and scores.looks_like_probabilities():
        raise bad(LOOKS_LIKE_PROBABILITIES)
    names = output_names(tensor_names)
    by_name = {SET_OUTPUT: SET_OUTPUT, **{name: kind for kind, name in names.items()}}
    wanted = request.outputs if request.outputs else [RequestedOutput(names["probabilities"], None)]
    probability_type = answer_datatype(dtype, request.datatype)
    # probabilities alone are computed in their answer's dtype; other outputs read the float64 ones
    answer = OUTPUT_DTYPES[probability_type] if all(by_name.get(s.name) == "probabilities" for s in wanted) else None
    with refused_as(bad):
        probabilities = predict(calibrator, scores, answer) if predict else calibrator.predict_batch(scores, answer)
    served = log(request.array, request.ids) if log else None
    outputs, binary = [], []
    for spec in wanted:
        kind = by_name.get(spec.name)
        if kind is None:
            raise bad(f"unknown output {short(spec.name)}; outputs are {', '.join(names.values())}, {SET_OUTPUT}")
        extra = None
        if kind == SET_OUTPUT:
            chosen, masked = sets
            value, datatype = masked(probabilities), "BOOL"
            extra = {"coverage": request.coverage, "set_predictor": chosen}
        elif kind == "probabilities":
            value, datatype = probabilities, probability_type
        elif kind == "predicted_class":
            value, datatype = cal.predicted_class(probabilities, getattr(scores, scores.source)), "INT64"
        else:
            value, datatype = probabilities.max(axis=1), probability_type
        value = np.ascontiguousarray(value, dtype=OUTPUT_DTYPES[datatype])
        entry: dict[str, Any] = {"name": spec.name, "datatype": datatype, "shape": list(value.shape)}
        if extra is not None:
            entry["parameters"] = extra
        if request.binary_default if spec.binary is None else spec.binary:
            entry["parameters"] = {**(extra or {}), "binary_data_size": value.nbytes}
            binary.append(value.reshape(-1).view(np.uint8).data)
        else:
            entry["data"] = value.ravel()
        outputs.append(entry)
    response: dict[str, Any] = {"model_name": model_name, "model_version": str(model_version), "outputs": outputs}
    if request.id is not None:
        response["id"] = request.id
    if served is not None:
        response["parameters"] = {"ids": served.ids, "logged": served.logged}
    header = orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY)
    if not binary:
        return [header], {"content-type": "application/json"}
    return [header, *binary], {"content-type": "application/octet-stream",
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
