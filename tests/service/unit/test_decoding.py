"""``app.decoding``: one typed batch from JSON, ``.npy`` and ``.npz`` bodies, and domain errors
(never HTTP ones) for what cannot be read."""

from __future__ import annotations

import io

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.platform.errors import InvalidInput, MalformedRequest, TooLarge, UnsupportedMediaType
from app.registry.schemas import AliasRequest, CalibrateFields, FitFields
from app.wire.costs import RequestLimits
from app.wire.decoding import RequestBody, decode_batch, decode_fields, media_type

LOGITS = np.array([[2.0, 0.5, -1.0], [0.3, 1.8, -0.2]])
LIMIT = RequestLimits(1 << 20, array_bytes=1 << 20)


def npy(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def test_the_three_body_formats_give_the_same_batch():
    labels = np.array([0, 1])
    fields = {"method": "temperature", "options": {"input": "logits"}, "class_names": ["a", "b", "c"]}
    query = {"method": "temperature", "options": '{"input": "logits"}', "class_names": "a,b,c"}
    as_json = decode_batch(RequestBody(orjson.dumps({**fields, "logits": LOGITS.tolist(), "labels": [0, 1]}),
                                       "application/json; charset=utf-8"), FitFields, need_labels=True,
                           limits=LIMIT)
    as_npz = decode_batch(RequestBody(npz(logits=LOGITS, labels=labels), "application/x-npz", query), FitFields,
                          need_labels=True, limits=LIMIT)
    for batch in (as_json, as_npz):
        assert batch.kind == "logits" and batch.fields == FitFields(**fields)
        np.testing.assert_array_equal(np.asarray(batch.values), LOGITS)
        np.testing.assert_array_equal(np.asarray(batch.labels), labels)


def test_a_bare_npy_is_of_the_kind_the_query_or_the_caller_says():
    body = npy(LOGITS)
    assert decode_batch(RequestBody(body, "application/x-npy"), CalibrateFields, need_labels=False,
                        limits=LIMIT).kind == "logits"
    assert decode_batch(RequestBody(body, "application/x-npy"), CalibrateFields, need_labels=False,
                        limits=LIMIT, npy_kind="probabilities").kind == "probabilities"
    batch = decode_batch(RequestBody(body, "application/x-npy", {"input": "scores", "outputs": "confidence,"}),
                         CalibrateFields, need_labels=False, limits=LIMIT, npy_kind="probabilities")
    assert batch.kind == "scores" and batch.fields.outputs == ["confidence"]


@pytest.mark.parametrize(("body", "error", "detail"), [
    (RequestBody(b"", "application/json"), MalformedRequest, "empty"),
    (RequestBody(b"[1]", "application/json"), MalformedRequest, "must be a JSON object"),
    (RequestBody(b"{}", "text/csv"), UnsupportedMediaType, "unsupported Content-Type 'text/csv'"),
    (RequestBody(npy(LOGITS), "application/x-npy"), UnsupportedMediaType, "needs labels"),
    (RequestBody(b'{"method": "temperature", "labels": [0]}'), InvalidInput, "exactly one of logits"),
    (RequestBody(b'{"method": "temperature", "logits": [[1, 2]]}'), InvalidInput, "labels are required"),
    (RequestBody(b'{"method": "temperature", "logits": [[1, 2]], "labels": [0], "colour": 1}'), InvalidInput,
     "colour: unknown field"),
    (RequestBody(npz(logits=LOGITS, labels=[0, 1], extra=[1]), "application/x-npz"), InvalidInput,
     "unknown .npz member(s) extra"),
    (RequestBody(npz(logits=np.zeros((600, 600)), labels=np.zeros(600)), "application/x-npz"), TooLarge,
     "expands beyond"),
    (RequestBody(npz(logits=LOGITS, labels=[0, 1]), "application/x-npz", {"options": "{"}), InvalidInput,
     "query parameter 'options' must be JSON"),
])
def test_what_cannot_be_decoded_is_a_domain_error_naming_the_problem(body, error, detail):
    with pytest.raises(error) as raised:
        decode_batch(body, FitFields, need_labels=True, limits=LIMIT)
    assert detail in raised.value.detail


def test_calibrate_bodies_take_no_labels_and_a_known_input_kind():
    with pytest.raises(InvalidInput, match="takes no labels"):
        decode_batch(RequestBody(orjson.dumps({"logits": [[1, 2]], "labels": [0]})), CalibrateFields,
                     need_labels=False, limits=LIMIT)
    with pytest.raises(InvalidInput, match="query parameter 'input' must be one of"):
        decode_batch(RequestBody(npy(LOGITS), "application/x-npy", {"input": "odds"}), CalibrateFields,
                     need_labels=False, limits=LIMIT)


def test_field_bodies_are_json_only():
    assert decode_fields(RequestBody(b'{"version": 3}'), AliasRequest).version == 3
    with pytest.raises(UnsupportedMediaType):
        decode_fields(RequestBody(b"version=3", "application/x-www-form-urlencoded"), AliasRequest)
    with pytest.raises(InvalidInput, match="version"):
        decode_fields(RequestBody(b'{"version": "3"}'), AliasRequest)


@given(st.text(max_size=30), st.sampled_from(["", "; charset=utf-8", " ;q=1"]))
def test_media_type_is_the_lower_cased_type_without_parameters(media, parameters):
    expected = media.split(";")[0].strip().lower()
    assert media_type(media + parameters) == expected
