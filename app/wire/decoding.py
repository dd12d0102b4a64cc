"""Request bodies → typed values: JSON (orjson, arrays straight to numpy), ``.npy`` (one array;
the other fields as query parameters) or ``.npz`` (named arrays; fields as query parameters).

``decode_batch`` gives one ``ArrayBatch``: the small fields validated by a pydantic model, the
input kind, the input array and the labels; ``decode_values`` the same with the fields turned into
the domain value (a frozen dataclass) the service takes, by the model's ``to_value()``
(``model_value``: its fields of the value's names). ``decode_fields`` reads a JSON body that carries
only fields. Both raise the service's domain errors (``app.platform.errors``), so a bad body is a 4xx
naming the field, never a 500. Array values are validated by the core, in the service.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from calibration import INPUT_KINDS

from ..platform.errors import InvalidInput, TooLarge, UnsupportedMediaType
from .batches import ArrayBatch
from .codecs import parse_json, read_npy, read_npz
from .costs import MAX_JSON_BYTES, RequestLimits

ModelT = TypeVar("ModelT", bound=BaseModel)

NPY_TYPE = "application/x-npy"
NPZ_TYPE = "application/x-npz"
JSON_TYPE = "application/json"
ARRAY_FIELDS = (*INPUT_KINDS, "labels")
JSON_QUERY_FIELDS = ("options", "tags", "tensor_names")  # query parameters given as JSON text
LIST_QUERY_FIELDS = ("outputs", "class_names", "ids")  # query parameters given as comma-separated lists
Value = TypeVar("Value")
Value_co = TypeVar("Value_co", covariant=True)


class ValueModel(Protocol[Value_co]):
    """A request model that turns into the domain value its service takes."""

    def to_value(self) -> Value_co: ...


def media_type(content_type: str | None) -> str:
    """The media type of a Content-Type header, without parameters, in lower case."""
    return (content_type or "").split(";")[0].strip().lower()


@dataclass(frozen=True)
class RequestBody:
    """A request's body with the Content-Type and query parameters that say how to read it."""

    content: bytes
    content_type: str | None = JSON_TYPE
    query: Mapping[str, str] = field(default_factory=dict)


def validate_fields(model: type[ModelT], payload: dict) -> ModelT:
    """``payload`` validated by ``model``; every error named by its field in one 422."""
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        parts = []
        for error in exc.errors():
            where = ".".join(str(p) for p in error["loc"]) or "body"
            message = "unknown field" if error["type"] == "extra_forbidden" else error["msg"]
            parts.append(f"{where}: {message}")
        raise InvalidInput("; ".join(parts)) from exc


def model_value(model: BaseModel, value_type: type[Value], **given: Any) -> Value:
    """The frozen dataclass ``value_type`` of a validated request model: each of its fields from the
    model's attribute of that name, or from ``given``."""
    names = [f.name for f in dataclasses.fields(value_type) if f.name not in given]  # type: ignore[arg-type]
    return value_type(**{name: getattr(model, name) for name in names}, **given)


def _query_payload(query: Mapping[str, str]) -> dict:
    payload: dict = {}
    for key, value in query.items():
        if key == "input":
            continue
        if key in JSON_QUERY_FIELDS:
            try:
                payload[key] = orjson.loads(value)
            except orjson.JSONDecodeError as exc:
                raise InvalidInput(f"query parameter {key!r} must be JSON: {exc}") from exc
        elif key in LIST_QUERY_FIELDS:
            payload[key] = [item for item in value.split(",") if item]
        else:
            payload[key] = value
    return payload


def _check_json_entries(arrays: dict, limits: RequestLimits) -> None:
    """A 413 when JSON arrays hold more than ``limits.entries`` entries (n·k, from the lengths of
    the outer list and of its first row; the core checks that the rows agree)."""
    entries = 0
    for value in arrays.values():
        if isinstance(value, list):
            first = value[0] if value else None
            entries += len(value) * (len(first) if isinstance(first, list) else 1)
    if entries > limits.entries:
        raise TooLarge(f"the arrays hold {entries} entries, over the limit of {limits.entries} entries per request "
                       "(CALIBRATION_MAX_ENTRIES)")


def decode_batch(body: RequestBody, model: type[ModelT], *, need_labels: bool, limits: RequestLimits,
                 npy_kind: str = "logits") -> ArrayBatch[ModelT]:
    """A body that carries one input array (and labels when ``need_labels``) plus small fields;
    a bare ``.npy`` without ``?input=`` is of kind ``npy_kind`` (a calibrator's own kind). The
    request budgets (``limits``: decoded array bytes, JSON bytes, n·k entries) are checked before
    any array is decoded."""
    content, query = body.content, body.query
    kind_type = media_type(body.content_type)
    if kind_type == JSON_TYPE:
        if len(content) > limits.json_bytes:
            raise TooLarge(f"a JSON body with arrays may be {limits.json_bytes} bytes at most "
                           f"(CALIBRATION_MAX_JSON_BYTES), got {len(content)}: send larger batches as "
                           f"{NPY_TYPE} or {NPZ_TYPE}")
        payload = parse_json(content)
        arrays = {name: payload.pop(name) for name in ARRAY_FIELDS if name in payload}
        _check_json_entries(arrays, limits)
        fields = validate_fields(model, payload)
    elif kind_type == NPY_TYPE:
        if need_labels:
            raise UnsupportedMediaType("this endpoint needs labels: send an .npz archive (application/x-npz) "
                                       "with the input array and 'labels', or JSON")
        kind = query.get("input") or npy_kind
        if kind not in INPUT_KINDS:
            raise InvalidInput(f"query parameter 'input' must be one of {', '.join(INPUT_KINDS)}")
        arrays = {kind: read_npy(content, kind, limits)}
        fields = validate_fields(model, _query_payload(query))
    elif kind_type == NPZ_TYPE:
        arrays = read_npz(content, limits)
        unknown = sorted(set(arrays) - set(ARRAY_FIELDS))
        if unknown:
            raise InvalidInput(f"unknown .npz member(s) {', '.join(unknown)}; expected {', '.join(ARRAY_FIELDS)}")
        fields = validate_fields(model, _query_payload(query))
    else:
        raise UnsupportedMediaType(f"unsupported Content-Type {body.content_type!r}: send {JSON_TYPE}, "
                                   f"{NPY_TYPE} or {NPZ_TYPE}")
    given = [name for name in INPUT_KINDS if arrays.get(name) is not None]
    if getattr(fields, "data", None) is not None:  # a fit on stored data: no arrays in the body
        if given or arrays.get("labels") is not None:
            raise InvalidInput("send either arrays or `data`, not both")
        return ArrayBatch(fields, None, None, None)
    if len(given) != 1:
        raise InvalidInput("send exactly one of logits, probabilities or scores"
                           + (f" (got {', '.join(given)})" if given else ""))
    labels = arrays.get("labels")
    if need_labels and labels is None:
        raise InvalidInput("labels are required")
    if not need_labels and labels is not None:
        raise InvalidInput("this endpoint takes no labels")
    return ArrayBatch(fields, given[0], arrays[given[0]], labels)


def decode_values(body: RequestBody, model: type[ValueModel[Value]], *, need_labels: bool, limits: RequestLimits,
                  npy_kind: str = "logits") -> ArrayBatch[Value]:
    """``decode_batch``, its fields turned into the domain value the service takes (``to_value()``)."""
    batch = decode_batch(body, model, need_labels=need_labels, limits=limits, npy_kind=npy_kind)  # type: ignore[type-var]
    return dataclasses.replace(batch, fields=batch.fields.to_value())


def decode_fields(body: RequestBody, model: type[ModelT], max_bytes: int = MAX_JSON_BYTES) -> ModelT:
    """A JSON body of fields only (no arrays), at most ``max_bytes`` (checked before parsing: a
    label call's list of ids costs ~10 times its text once parsed)."""
    if media_type(body.content_type) != JSON_TYPE:
        raise UnsupportedMediaType(f"send {JSON_TYPE}")
    if len(body.content) > max_bytes:
        raise TooLarge(f"this JSON body may be {max_bytes} bytes at most (CALIBRATION_MAX_JSON_BYTES), "
                       f"got {len(body.content)}: send it in parts")
    return validate_fields(model, parse_json(body.content))
