"""The hot path's routes (calibrate, /v2 infer) skip FastAPI's router and dependency solver
(``hot_path.Shortcut``): every answer must be the one FastAPI's own routing gives, access
checks and errors included."""

from __future__ import annotations

import io

import numpy as np
import pytest
from fastapi import FastAPI
from starlette.testclient import TestClient

from app import keys
from app.main import create_app
from app.migrate import upgrade
from app.routes.hot_path import Shortcut
from app.schemas import EXAMPLE_LABELS, EXAMPLE_LOGITS
from app.settings import Settings

HOT = {"/v1/calibrators/{ref}/calibrate", "/v1/calibrators/{name}/versions/{version}/calibrate",
       "/v2/models/{name}/infer", "/v2/models/{name}/versions/{version}/infer"}
BATCH = {"logits": EXAMPLE_LOGITS}
INFER = {"inputs": [{"name": "logits", "shape": [1, 3], "datatype": "FP64", "data": [1.0, 2.0, 3.0]}]}


def _npy(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array, dtype=np.float32), allow_pickle=False)
    return buffer.getvalue()


# (method, path, JSON body or (content type, bytes), key's scope or None)
CASES = [
    ("post", "/v1/calibrators/demo/calibrate", BATCH, "read"),
    ("post", "/v1/calibrators/demo@production/calibrate", BATCH, "read"),
    ("post", "/v1/calibrators/demo/calibrate?outputs=probabilities,confidence", BATCH, "read"),
    ("post", "/v1/calibrators/demo/calibrate", ("application/x-npy", _npy(EXAMPLE_LOGITS)), "read"),
    ("post", "/v1/calibrators/demo/calibrate", ("application/x-npy", b"not an array"), "read"),
    ("post", "/v1/calibrators/demo/calibrate", ("text/plain", b"hello"), "read"),
    ("post", "/v1/calibrators/demo/calibrate", {"logits": [[1.0, "x", 2.0]]}, "read"),
    ("post", "/v1/calibrators/demo/calibrate", BATCH, None),
    ("post", "/v1/calibrators/demo/calibrate", BATCH, "bad"),
    ("post", "/v1/calibrators/demo/calibrate", BATCH, "write"),
    ("post", "/v1/calibrators/nothing/calibrate", BATCH, "read"),
    ("post", "/v1/calibrators/demo@nowhere/calibrate", BATCH, "read"),
    ("post", "/v1/calibrators/no%20such/calibrate", BATCH, "read"),
    ("get", "/v1/calibrators/demo/calibrate", None, "read"),
    ("put", "/v1/calibrators/demo/calibrate", BATCH, "read"),
    ("post", "/v1/calibrators/demo/calibrate/", BATCH, "read"),
    ("post", "/v1/calibrators/demo/versions/1/calibrate", BATCH, "read"),
    ("post", "/v1/calibrators/demo/versions/9/calibrate", BATCH, "read"),
    ("post", "/v1/calibrators/demo/versions/1/calibrate", BATCH, None),
    ("post", "/v1/calibrators/demo/versions/1/calibrate", BATCH, "write"),
    *[("post", f"/v1/calibrators/demo/versions/{version}/calibrate", BATCH, "read")
      for version in ("0", "01", "+1", "1.0", "x", "2147483647", "2147483648", "99999999999", "%201")],
    ("post", "/v2/models/demo/infer", INFER, "read"),
    ("post", "/v2/models/demo/infer", INFER, None),
    ("post", "/v2/models/demo/infer", INFER, "write"),
    ("post", "/v2/models/demo/infer", {"inputs": []}, "read"),
    ("post", "/v2/models/nothing/infer", INFER, "read"),
    ("post", "/v2/models/demo/versions/1/infer", INFER, "read"),
    ("post", "/v2/models/demo/versions/production/infer", INFER, "read"),
    ("post", "/v2/models/demo/versions/0/infer", INFER, "read"),
    ("get", "/v2/models/demo/infer", None, "read"),
]
VARYING = {"date"}


def _answer(client, method, path, body, key):
    headers = {"x-request-id": "same-in-both"}  # problems carry it in their body
    if key:
        headers["x-api-key"] = key
    if isinstance(body, tuple):
        headers["content-type"] = body[0]
        response = client.request(method.upper(), path, content=body[1], headers=headers)
    else:
        response = client.request(method.upper(), path, json=body, headers=headers)
    return (response.status_code, {k: v for k, v in response.headers.items() if k not in VARYING},
            response.content)


def _without_shortcut(app: FastAPI) -> FastAPI:
    app.build_middleware_stack = lambda: FastAPI.build_middleware_stack(app)
    return app


@pytest.mark.parametrize("keys_on", [True, False])
def test_the_shortcut_answers_as_fastapi_does(sqlite_url, keys_on):
    upgrade(sqlite_url)
    settings = Settings(database_url=sqlite_url, api_keys_enabled=keys_on, api_key_cache_seconds=0)
    fast, plain = create_app(settings), _without_shortcut(create_app(settings))
    issued = {scope: keys.create_key(fast.state.db, f"{scope} key", [scope])[1] for scope in keys.SCOPES}
    issued["bad"] = "cal_0123456789ab_" + "x" * 43
    with TestClient(fast) as fast_client, TestClient(plain) as plain_client:
        admin = {"x-api-key": issued["admin"]}
        assert fast_client.post("/v1/calibrators/demo/versions", headers=admin,
                                json={"method": "temperature", "logits": EXAMPLE_LOGITS,
                                      "labels": EXAMPLE_LABELS}).status_code == 201
        assert fast_client.put("/v1/calibrators/demo/aliases/production", headers=admin,
                               json={"version": 1}).status_code == 200
        assert isinstance(fast.state.shortcut, Shortcut)
        assert {route.path for route, _, _ in fast.state.shortcut.routes} == HOT
        for method, path, body, scope in CASES:
            key = issued.get(scope) if scope else None
            ours, theirs = _answer(fast_client, method, path, body, key), _answer(plain_client, method, path, body, key)
            assert ours == theirs, (method, path, scope)
        assert not hasattr(plain.state, "shortcut")
        # the access log's and the metrics' route label is the route's template, as FastAPI's
        metrics = fast_client.get("/metrics").text
        assert 'route="/v1/calibrators/{ref}/calibrate",status="200"' in metrics
        assert 'route="/v1/calibrators/{name}/versions/{version}/calibrate",status="200"' in metrics
        assert 'route="/v2/models/{name}/infer",status="200"' in metrics
