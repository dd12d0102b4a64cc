"""Hostile and broken requests, on every kind of endpoint of /v1 and /v2: each gets its 4xx with a
precise message, and the database is unchanged afterwards (byte for byte on SQLite, row for row
on both)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import sqlite3
from functools import partial
from pathlib import Path

import numpy as np
from sqlalchemy import text
from sqlalchemy.engine import make_url

from app.all_rows import Base
from tests.service.support.bodies import zip_bomb

L = [[2.0, 0.5, -1.0], [0.1, 1.5, 0.3], [-0.5, 0.2, 2.2], [1.0, 1.1, 0.9]]
Y = [0, 1, 2, 0]
FIT = "/v1/calibrators/x/versions"
FIT_NPZ = FIT + "?method=temperature"
CAL = "/v1/calibrators/demo/calibrate"
REPORT = "/v1/calibrators/demo/report"
INFER = "/v2/models/demo/infer"
JSON = {"content-type": "application/json"}
NPY = {"content-type": "application/x-npy"}
NPZ = {"content-type": "application/x-npz"}


def npy(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def raw(body: bytes | partial, headers=JSON) -> dict:
    """``body``: the bytes, or a ``partial`` that builds them when the case is sent (the zip bombs:
    not built when the file is only collected)."""
    return {"content": body, "headers": headers}


def fit(**fields) -> dict:
    return {"json": {"method": "temperature", "logits": L, "labels": Y, **fields}}


def infer(**tensor) -> dict:
    return {"json": {"inputs": [{"name": "logits", "shape": [1, 3], "datatype": "FP64", "data": [1, 2, 3], **tensor}]}}


def infer_with(**fields) -> dict:
    """A valid /v2 request with request-level fields (outputs, parameters) added."""
    return {"json": {**infer()["json"], **fields}}


NPY_BYTES = npy(np.zeros((2, 3)))
CASES = [
    # numbers that are not numbers
    ("NaN literal", "post", CAL, raw(b'{"logits": [[NaN, 1, 2]]}'), 400, "malformed JSON"),
    ("infinity literal", "post", FIT, raw(b'{"method": "temperature", "logits": [[1e999, 1, 2]], "labels": [0]}'),
     400, "number is infinity"),
    ("NaN in .npy", "post", CAL, raw(npy(np.array([[np.nan, 1, 2.0]])), NPY), 422,
     "logits contains NaN or infinity (first in row 0)"),
    ("inf in .npy", "post", CAL, raw(npy(np.array([[1, 2, 3.0], [1, -np.inf, 2]])), NPY), 422,
     "logits contains NaN or infinity (first in row 1)"),
    ("NaN in .npz fit", "post", FIT_NPZ, raw(npz(logits=np.array([[np.nan, 1, 2.0], [1, 2, 3]]),
                                                 labels=np.array([0, 1])), NPZ), 422, "logits contains NaN"),
    ("1e308 fit", "post", FIT, fit(logits=[[1e308, 1, 2], [1, 2, 3]], labels=[0, 1]), 422,
     "temperature is outside [1e-6, 1e6]"),
    ("1e308 calibrate", "post", CAL, {"json": {"logits": [[1e308, -1e308, 2.0]]}}, 422,
     "row 0 overflow: its inputs (largest magnitude 1e+308)"),
    # shapes
    ("ragged rows", "post", CAL, {"json": {"logits": [[1, 2, 3], [1, 2]]}}, 422, "logits is ragged"),
    ("empty array", "post", CAL, {"json": {"logits": []}}, 422, "must be a 2-D array (n samples, k classes)"),
    ("empty rows", "post", CAL, {"json": {"logits": [[]]}}, 422, "at least 2 classes (columns), got 0"),
    ("3-D array", "post", CAL, {"json": {"logits": [[[1, 2, 3]]]}}, 422, "got shape (1, 1, 3)"),
    ("scalar", "post", CAL, {"json": {"logits": 5}}, 422, "got shape ()"),
    ("k = 1", "post", FIT, fit(logits=[[1], [2]], labels=[0, 0]), 422, "at least 2 classes (columns), got 1"),
    ("k = 10000, no signal", "post", FIT, fit(logits=np.zeros((3, 10000)).tolist(), labels=[0, 1, 2]), 422,
     "no finite optimum"),
    ("wrong k", "post", CAL, {"json": {"logits": [[1, 2]]}}, 422, "fitted on 3 classes; the input has 2"),
    ("binary scores as 2-D", "post", CAL, {"json": {"scores": [[0.1, 0.2, 0.3]]}}, 422,
     "fitted on logits; send logits, not scores"),
    ("two inputs", "post", CAL, {"json": {"logits": [[1, 2, 3]], "probabilities": [[0.2, 0.3, 0.5]]}}, 422,
     "send exactly one of logits, probabilities or scores (got logits, probabilities)"),
    ("null input", "post", CAL, {"json": {"logits": None}}, 422, "send exactly one of"),
    # labels
    ("label out of range", "post", FIT, fit(labels=[0, 1, 5, 0]), 422, "labels must be in [0, 3); found 5 in row 2"),
    ("negative label", "post", FIT, fit(labels=[0, 1, -1, 0]), 422, "found -1 in row 2"),
    ("float labels", "post", FIT, fit(labels=[0, 1, 1.5, 0]), 422, "labels must be integers"),
    ("too few labels", "post", FIT, fit(labels=[0, 1]), 422, "labels has 2 entries but the inputs have 4 rows"),
    ("float labels in .npz", "post", FIT_NPZ, raw(npz(logits=np.array(L), labels=np.array(Y) + 0.5), NPZ), 422,
     "labels must be integers"),
    ("uint64 label in .npz", "post", FIT_NPZ, raw(npz(logits=np.array(L), labels=np.array([2**63 + 5, 0, 1, 0],
                                                                                           np.uint64)), NPZ),
     422, "found 9223372036854775813 in row 0"),
    ("labels on calibrate", "post", CAL, {"json": {"logits": [[1, 2, 3]], "labels": [0]}}, 422, "takes no labels"),
    ("report without labels", "post", REPORT, {"json": {"logits": [[1, 2, 3]]}}, 422, "labels are required"),
    # wrong dtypes
    ("strings", "post", CAL, {"json": {"logits": [["a", "b", "c"]]}}, 422, "must hold real numbers, got dtype <U1"),
    ("booleans", "post", CAL, {"json": {"logits": [[True, False, True]]}}, 422, "got dtype bool"),
    ("object", "post", CAL, {"json": {"logits": {"a": 1}}}, 422, "got dtype object"),
    ("complex .npy", "post", CAL, raw(npy(np.zeros((2, 3), complex)), NPY), 422, "has dtype complex128"),
    ("string .npy", "post", CAL, raw(npy(np.array([["a", "b", "c"]])), NPY), 422, "has dtype <U1"),
    ("0-d .npy", "post", CAL, raw(npy(np.float64(1.0)), NPY), 422, "got shape ()"),
    # .npy / .npz that lie or carry pickles
    ("pickled .npy", "post", CAL, raw(npy(np.array([{"a": 1}], dtype=object)), NPY), 422,
     "has dtype object; only numeric arrays are accepted (no objects, no pickles)"),
    ("pickled .npz member", "post", FIT_NPZ, raw(npz(logits=np.array([{"a": 1}], dtype=object),
                                                     labels=np.array([0])), NPZ), 422, "no pickles"),
    ("truncated .npy", "post", CAL, raw(NPY_BYTES[:-8], NPY), 422,
     "the .npy header promises 48 bytes of data for shape (2, 3), the body holds 40"),
    ("lying .npy shape", "post", CAL, raw(NPY_BYTES.replace(b"(2, 3)", b"(9, 3)"), NPY), 422,
     "promises 216 bytes of data for shape (9, 3)"),
    ("negative .npy shape", "post", CAL, raw(NPY_BYTES.replace(b"(2, 3)", b"(-2, 3)"), NPY), 422,
     "for shape (-2, 3)"),
    ("enormous .npy shape", "post", CAL, raw(NPY_BYTES.replace(b"(2, 3)", b"(99999999999, 99999999999)"), NPY),
     413, "shape (99999999999, 99999999999) of float64, 79999999998400000000008 bytes decoded, over the "
     "268435456-byte limit (CALIBRATION_MAX_ARRAY_BYTES)"),
    ("garbage .npy header", "post", CAL, raw(b"\x93NUMPY\x01\x00garbage", NPY), 422, "is not a valid .npy array"),
    ("not a zip", "post", FIT_NPZ, raw(b"PK\x03\x04garbage", NPZ), 422, "is not a valid .npz archive"),
    ("zip bomb", "post", FIT_NPZ, raw(partial(zip_bomb), NPZ), 413,
     "expands beyond the 268435456-byte limit (CALIBRATION_MAX_ARRAY_BYTES): its members declare 320000280 bytes"),
    ("zip bomb in the .npy header", "post", FIT_NPZ, raw(partial(zip_bomb, (10**6, 10**5), data_bytes=64), NPZ), 413,
     "declares shape (1000000, 100000) of float64, 800000000000 bytes decoded, over the 268435456-byte limit"),
    (".npz of too many entries", "post", FIT_NPZ, raw(partial(zip_bomb, (5000, 5000), "|i1", data_bytes=64), NPZ), 413,
     "25000000 entries, over the limit of 16777216 entries per request (CALIBRATION_MAX_ENTRIES)"),
    ("bad options in the query", "post", FIT_NPZ + "&options={bad", raw(npz(logits=np.array(L), labels=np.array(Y)),
                                                                        NPZ), 422, "'options' must be JSON"),
    # JSON and content types
    ("malformed JSON", "post", FIT, raw(b'{"method":'), 400, "malformed JSON: unexpected end of data"),
    ("JSON array body", "post", FIT, raw(b"[1, 2]"), 400, "must be a JSON object"),
    ("UTF-16 body", "post", FIT, raw('{"a": 1}'.encode("utf-16")), 400, "not valid UTF-8"),
    ("empty body", "post", FIT, raw(b""), 400, "the request body is empty"),
    ("text/plain", "post", FIT, raw(b"{}", {"content-type": "text/plain"}), 415,
     "unsupported Content-Type 'text/plain'"),
    ("no content type", "post", CAL, raw(b"{}", {}), 415, "unsupported Content-Type None"),
    ("labels via .npy", "post", FIT + "?method=temperature", raw(NPY_BYTES, NPY), 415, "this endpoint needs labels"),
    # methods and options
    ("unknown method", "post", FIT, fit(method="nope"), 422, "unknown method 'nope'; known methods: temperature"),
    ("unknown option", "post", FIT, fit(options={"zzz": 1}), 422, "unknown option(s) 'zzz' for method 'temperature'"),
    ("option of the wrong type", "post", FIT, fit(method="dirichlet", options={"off_diagonal_l2": "a"}), 422,
     "option 'off_diagonal_l2' must be a number, got 'a'"),
    ("negative option", "post", FIT, fit(method="dirichlet", options={"off_diagonal_l2": -1}), 422,
     "must be >= 0.0, got -1.0"),
    ("options as a list", "post", FIT, fit(options=[1]), 422, "options: Input should be a valid dictionary"),
    ("unknown field", "post", FIT, fit(logit=L), 422, "logit: unknown field"),
    # names, versions and aliases
    ("name with a slash", "post", "/v1/calibrators/a%2Fb/versions", fit(), 404,
     "no such endpoint: POST /v1/calibrators/a/b/versions"),
    ("unicode name", "post", "/v1/calibrators/%C3%A9t%C3%A9/versions", fit(), 422, "invalid calibrator name 'été'"),
    ("10 kB name", "post", "/v1/calibrators/" + "a" * 10_000 + "/versions", fit(), 422, "invalid calibrator name"),
    ("NUL in a name", "post", "/v1/calibrators/a%00b/versions", fit(), 422, "invalid calibrator name 'a\\x00b'"),
    ("name ending in a newline", "post", "/v1/calibrators/x%0A/versions", fit(), 422,
     "invalid calibrator name 'x\\n'"),
    ("128 characters and a newline", "post", "/v1/calibrators/" + "a" * 128 + "%0A/versions", fit(), 422,
     "invalid calibrator name 'aaaa"),
    ("alias ending in a newline", "put", "/v1/calibrators/demo/aliases/staging%0A", {"json": {"version": 1}}, 422,
     "invalid alias 'staging\\n'"),
    ("64 characters and a newline", "put", "/v1/calibrators/demo/aliases/" + "a" * 64 + "%0A",
     {"json": {"version": 1}}, 422, "invalid alias 'aaaa"),
    ("empty alias", "post", "/v1/calibrators/demo@/calibrate", {"json": {"logits": [[1, 2, 3]]}}, 422,
     "invalid alias '': use 1-64 letters"),
    ("alias to a missing version", "put", "/v1/calibrators/demo/aliases/staging", {"json": {"version": 99}}, 404,
     "calibrator 'demo' has no version 99"),
    ("alias to a string", "put", "/v1/calibrators/demo/aliases/staging", {"json": {"version": "1"}}, 422,
     "version: Input should be a valid integer"),
    ("alias to an alias (cycle)", "put", "/v1/calibrators/demo/aliases/staging",
     {"json": {"version": "demo@production"}}, 422, "version: Input should be a valid integer"),
    ("alias to 2**70", "put", "/v1/calibrators/demo/aliases/staging", {"json": {"version": 2**70}}, 422,
     "version: Input should be a valid integer"),
    ("alias to 2**31", "put", "/v1/calibrators/demo/aliases/staging", {"json": {"version": 2**31}}, 422,
     "version: Input should be less than or equal to 2147483647"),
    ("alias named latest", "put", "/v1/calibrators/demo/aliases/latest", {"json": {"version": 1}}, 422,
     "('latest' is reserved)"),
    ("nested alias reference", "post", "/v1/calibrators/demo@a@b/calibrate", {"json": {"logits": [[1, 2, 3]]}}, 422,
     "invalid alias 'a@b'"),
    ("version beyond int32", "get", "/v1/calibrators/demo/versions/99999999999999", {}, 422,
     "less than or equal to 2147483647"),
    ("delete a version an alias holds", "delete", "/v1/calibrators/demo/versions/1", {}, 409, "production"),
    ("page size 0", "get", "/v1/calibrators?page_size=0", {}, 422, "greater than or equal to 1"),
    ("forged page token", "get", "/v1/calibrators?page_token=%%%", {}, 422, "invalid page_token"),
    # bounded work
    ("n_bins 10**9", "post", "/v1/metrics", {"json": {"probabilities": [[0.2, 0.8]], "labels": [1], "n_bins": 10**9}},
     422, "n_bins: Input should be less than or equal to 1000"),
    ("bootstrap 10**9", "post", "/v1/metrics", {"json": {"probabilities": [[0.2, 0.8]], "labels": [1],
                                                          "bootstrap": 10**9}}, 422, "less than or equal to 2000"),
    ("two million histogram bins", "post", FIT, fit(method="histogram_binning", options={"n_bins": 2_000_000}), 422,
     "option 'n_bins' must be <= 10000, got 2000000"),
    ("dirichlet of 100000 classes on 3 rows", "post", FIT,
     fit(method="dirichlet", logits=np.zeros((3, 100_000)).tolist(), labels=[0, 1, 2]), 422,
     "would store up to 10000100000 fitted parameters, over the limit of 2000000 (CALIBRATION_MAX_PARAMETERS)"),
    ("class_temperature grid of 10**6", "post", FIT, fit(method="class_temperature", options={"grid_size": 10**6}),
     422, "option 'grid_size' must be <= 1000"),
    ("30 candidates", "post", "/v1/compare", {"json": {"logits": L, "labels": Y, "folds": 2,
                                                        "methods": [{"method": "temperature", "name": f"t{i}"}
                                                                    for i in range(30)]}},
     422, "a comparison may have at most 20 candidates, got 30"),
    ("1000 folds", "post", "/v1/compare", {"json": {"logits": L, "labels": Y, "folds": 1000}}, 422,
     "folds: Input should be less than or equal to 20"),
    ("negative probabilities", "post", "/v1/metrics", {"json": {"probabilities": [[-0.1, 1.1]], "labels": [1]}}, 422,
     "must lie in [0, 1]"),
    ("logits sent as probabilities", "post", "/v1/metrics", {"json": {"probabilities": [[2.0, 1.0]], "labels": [1]}},
     422, "rows must sum to 1"),
    ("unknown job", "get", "/v1/jobs/zzz", {}, 404, "no job 'zzz'"),
    ("declared body over the limit", "post", FIT, raw(b"{}", {**JSON, "content-length": str(4 * 1024 * 1024 + 1)}),
     413, "exceeds the limit of 4194304 bytes (CALIBRATION_MAX_BODY_BYTES)"),
    # the Open Inference Protocol
    ("v2: null in data", "post", INFER, infer(data=[None, 1, 2]), 400, "logits contains NaN or infinity"),
    ("v2: shape that lies", "post", INFER, infer(shape=[5, 3]), 400, "'data' holds 3 values, shape [5, 3] needs 15"),
    ("v2: negative shape", "post", INFER, infer(shape=[-1, 3]), 400, "'shape' must be a list of non-negative integers"),
    ("v2: enormous shape", "post", INFER, infer(shape=[99999999999, 99999999999]), 400,
     "shape [99999999999, 99999999999] has 9999999999800000000001 elements, beyond the int64 range"),
    ("v2: shape beyond int64", "post", INFER, infer(shape=[2**62, 4]), 400,
     "has 18446744073709551616 elements, beyond the int64 range"),
    ("v2: shape of 3 dimensions", "post", INFER, infer(shape=[1, 1, 3]), 400,
     "'shape' must have 1 or 2 dimensions ([-1] for binary scores, [-1, k] otherwise), got [1, 1, 3]"),
    ("v2: shape of 33 dimensions", "post", INFER, infer(shape=[1] * 32 + [3]), 400,
     "'shape' must have 1 or 2 dimensions"),
    ("v2: dimension of 2**70", "post", INFER, infer(shape=[2**70, 3]), 400,
     "'shape' must be a list of non-negative integers"),
    ("v2: datatype as a list", "post", INFER, infer(datatype=["FP32"]), 400,
     "datatype must be one of FP16, FP32, FP64, got ['FP32']"),
    ("v2: input parameters as a list", "post", INFER, infer(parameters=[]), 400,
     "input 'logits': 'parameters' must be an object, got []"),
    ("v2: strings as data", "post", INFER, infer(data=["1", "2", "3"]), 400,
     "input 'logits': 'data' must be numbers (nested or flat), got strings"),
    ("v2: booleans as data", "post", INFER, infer(data=[True, False, True]), 400, "got booleans"),
    ("v2: FP16 overflow", "post", INFER, infer(datatype="FP16", data=[1e5, 1, 2]), 400,
     "input 'logits': 100000.0 is beyond the range of FP16"),
    ("v2: output name as a list", "post", INFER, infer_with(outputs=[{"name": ["probabilities"]}]), 400,
     "output 0: 'name' must be a string, got ['probabilities']"),
    ("v2: output without a name", "post", INFER, infer_with(outputs=[{}]), 400,
     "output 0: 'name' must be a string, got None"),
    ("v2: output parameters as a list", "post", INFER,
     infer_with(outputs=[{"name": "probabilities", "parameters": [1]}]), 400,
     "output 'probabilities': 'parameters' must be an object, got [1]"),
    ("v2: binary_data as a string", "post", INFER,
     infer_with(outputs=[{"name": "probabilities", "parameters": {"binary_data": "yes"}}]), 400,
     "output 'probabilities': parameter 'binary_data' must be true or false, got 'yes'"),
    ("v2: binary_data_output as a string", "post", INFER, infer_with(parameters={"binary_data_output": "false"}),
     400, "parameter 'binary_data_output' must be true or false, got 'false'"),
    ("v2: request parameters as a number", "post", INFER, infer_with(parameters=0), 400,
     "'parameters' must be an object, got 0"),
    ("v2: data and binary data", "post", INFER,
     raw(b'{"inputs": [{"name": "logits", "shape": [1, 3], "datatype": "FP64", "data": [1, 2, 3], '
         b'"parameters": {"binary_data_size": 24}}]}' + bytes(24), {"inference-header-content-length": "128"}),
     400, "input 'logits' has both 'data' and binary data"),
    ("v2: header length with a sign", "post", INFER, raw(b"{}", {"inference-header-content-length": "+2"}), 400,
     "Inference-Header-Content-Length must be a non-negative integer, got '+2'"),
    ("v2: BYTES tensor", "post", INFER, infer(datatype="BYTES", data=["a", "b", "c"]), 400,
     "datatype must be one of FP16, FP32, FP64, got 'BYTES'"),
    ("v2: no inputs", "post", INFER, {"json": {"inputs": []}}, 400, "exactly one input tensor"),
    ("v2: malformed JSON", "post", INFER, raw(b"{"), 400, "malformed JSON"),
    ("v2: wrong k", "post", INFER, infer(shape=[1, 2], data=[1, 2]), 400, "fitted on 3 classes; the input has 2"),
    ("v2: header length beyond the body", "post", INFER, raw(b"{}", {"inference-header-content-length": "999999"}),
     400, "Inference-Header-Content-Length 999999 does not fit a body of 2 bytes"),
    ("v2: version that is not a number", "post", "/v2/models/demo/versions/abc/infer", infer(), 404,
     "no model version 'abc'"),
    ("v2: version in Arabic-Indic digits", "get", "/v2/models/demo/versions/%D9%A1", {}, 404,
     "no model version '\u0661'"),
    ("v2: version in superscript digits", "post", "/v2/models/demo/versions/%C2%B2/infer", infer(), 404,
     "no model version '\u00b2'"),
    ("v2: version of 5000 digits", "get", "/v2/models/demo/versions/" + "1" * 5000, {}, 404,
     "no model version '1111"),
    ("v2: model name ending in a newline", "get", "/v2/models/demo%0A", {}, 404, "no model named 'demo\\n'"),
    ("v2: 10 kB model name", "get", "/v2/models/" + "a" * 10_000, {}, 404, "no model named 'aaaa"),
]


def test_there_are_at_least_forty_cases():
    assert len(CASES) >= 40 and len({case[0] for case in CASES}) == len(CASES)


def _snapshot(client) -> tuple[dict, str | None]:
    """Every row of every table, and on SQLite the checkpointed file's sha256."""
    database = client.app.state.db
    rows = {}
    with database.engine.connect() as connection:
        for table in Base.metadata.sorted_tables:
            rows[table.name] = sorted(map(repr, connection.execute(table.select()).all()))
    if database.dialect != "sqlite":
        return rows, None
    path = make_url(database.url).database
    with contextlib.closing(sqlite3.connect(path)) as connection:
        busy = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    assert busy == 0, "the checkpoint was blocked"
    return rows, hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_hostile_requests_get_precise_4xx_and_change_nothing(client):
    created = client.post("/v1/calibrators/demo/versions", json={"method": "temperature", "logits": L, "labels": Y})
    assert created.status_code == 201
    assert client.put("/v1/calibrators/demo/aliases/production", json={"version": 1}).status_code == 200
    before = _snapshot(client)
    # one calibrator, one version, one alias and its recorded move, and the registry's generation counter
    assert sum(map(len, before[0].values())) == 5
    assert len(before[0]["registry_generation"]) == 1
    failures = []
    for name, method, path, kwargs, status, detail in CASES:
        if isinstance(kwargs.get("content"), partial):
            kwargs = {**kwargs, "content": kwargs["content"]()}
        response = client.request(method.upper(), path, **kwargs)
        if path.startswith("/v2"):
            said = response.json().get("error", "") if response.headers["content-type"] == "application/json" else ""
        else:
            assert response.headers["content-type"] == "application/problem+json", name
            said = response.json()["detail"]
        if response.status_code != status or detail not in said:
            failures.append(f"{name}: {response.status_code} {said[:200]!r}")
    assert not failures, "\n".join(failures)
    assert _snapshot(client) == before
    with client.app.state.db.read() as session:
        assert session.execute(text("SELECT count(*) FROM calibrator_versions")).scalar() == 1
