"""The hot path's routes (calibrate, /v2 infer) skip FastAPI's router and dependency solver
(``app.routes.shortcut.Shortcut``): every answer must be the one FastAPI's own routing gives, access
checks and errors included."""

from __future__ import annotations

import io

import numpy as np
import pytest
from fastapi import Depends, FastAPI, HTTPException, Request
from starlette.responses import JSONResponse
from starlette.testclient import TestClient

from app.access import keys
from app.http import auth
from app.http.shortcut import Shortcut
from app.main import create_app
from app.oip import protocol as oip
from app.platform.migrate import upgrade
from app.registry.schemas import EXAMPLE_LABELS, EXAMPLE_LOGITS
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
    app.user_middleware = [layer for layer in app.user_middleware if layer.cls is not Shortcut]
    del app.state.hot_routes
    return app


def _shortcut(app: FastAPI) -> Shortcut:
    """The app's ``Shortcut`` as it serves (its middleware is built at the first request)."""
    layer = app.middleware_stack
    while not isinstance(layer, Shortcut):
        layer = layer.inner if isinstance(layer, _Tag) else layer.app
    return layer


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
        assert {route.path for route, *_ in _shortcut(fast).routes} == HOT
        for method, path, body, scope in CASES:
            key = issued.get(scope) if scope else None
            ours, theirs = _answer(fast_client, method, path, body, key), _answer(plain_client, method, path, body, key)
            assert ours == theirs, (method, path, scope)
        assert not hasattr(plain.state, "hot_routes")
        # the access log's and the metrics' route label is the route's template, as FastAPI's
        metrics = fast_client.get("/metrics").text
        assert 'route="/v1/calibrators/{ref}/calibrate",status="200"' in metrics
        assert 'route="/v1/calibrators/{name}/versions/{version}/calibrate",status="200"' in metrics
        assert 'route="/v2/models/{name}/infer",status="200"' in metrics


async def _deny(request: Request) -> None:
    raise HTTPException(403, "denied by a gate added where the routers are included")


class _Tag:
    """A plain ASGI middleware that keeps the app it wraps under another name than ``.app``."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        await self.inner(scope, receive, send)


@pytest.mark.parametrize("shortcut", [True, False])
def test_gates_fastapi_adds_outside_a_route_and_overrides_hold_on_the_shortcut(sqlite_url, monkeypatch, shortcut):
    """A dependency added where the routers are included runs on the hot routes too, and while
    ``app.dependency_overrides`` holds anything the router serves them (the override runs)."""
    upgrade(sqlite_url)
    include = FastAPI.include_router

    def include_with_gate(self, router, **options):
        options.setdefault("dependencies", [Depends(_deny)])
        return include(self, router, **options)

    monkeypatch.setattr(FastAPI, "include_router", include_with_gate)
    gated = create_app(Settings(database_url=sqlite_url))
    monkeypatch.undo()
    overridden = create_app(Settings(database_url=sqlite_url))
    overridden.dependency_overrides[auth.READ.dependency] = _deny
    if not shortcut:
        gated, overridden = _without_shortcut(gated), _without_shortcut(overridden)
    for app in (gated, overridden):
        with TestClient(app) as client:
            answer = client.post("/v1/calibrators/demo/calibrate", json=BATCH)
            assert answer.status_code == 403 and "denied" in answer.json()["detail"], answer.text
    if shortcut:
        assert not gated.state.hot_routes  # no hot route is plain any more: the router serves them


def test_a_middleware_that_names_its_app_otherwise_leaves_the_shortcut_working(sqlite_url):
    upgrade(sqlite_url)
    app = create_app(Settings(database_url=sqlite_url))
    app.add_middleware(_Tag)
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        assert client.post("/v1/calibrators/demo/calibrate", json=BATCH).status_code == 404
    assert _shortcut(app).routes


class _Unanswered(Exception):
    """An error no handler of the app's answers but its catch-all for ``Exception``."""


class _Answered(Exception):
    """An error a handler added after the app was made answers (a sync one: run on a thread)."""


def test_errors_of_a_hot_route_get_the_apps_handlers_as_through_fastapis_middleware(sqlite_url, monkeypatch):
    """The shortcut sits outside FastAPI's exception middleware, so it answers errors itself: a
    handled one by its handler (sync handlers too), an unhandled one by the server-error
    middleware's 500 problem, the same answers as FastAPI's own stack gives."""
    upgrade(sqlite_url)
    answers = []
    for shortcut in (True, False):
        app = create_app(Settings(database_url=sqlite_url))
        app.add_exception_handler(_Answered, lambda request, exc: JSONResponse({"answered": str(exc)}, status_code=418))
        if not shortcut:
            app = _without_shortcut(app)
        with TestClient(app, raise_server_exceptions=False) as client:
            assert client.post("/v1/calibrators/demo/versions", json={
                "method": "temperature", "logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS}).status_code == 201
            for error in (_Unanswered("boom"), _Answered("caught")):
                def fail(*args, error=error, **kwargs):
                    raise error
                monkeypatch.setattr(oip, "infer", fail)
                answers.append(_answer(client, "post", "/v2/models/demo/infer", INFER, None))
                monkeypatch.undo()
            # ids and routing as before for an error raised in the endpoint itself
            answers.append(_answer(client, "post", "/v2/models/nothing/infer", INFER, None))
        if shortcut:
            assert _shortcut(app).routes
    ours, theirs = answers[:3], answers[3:]
    assert ours == theirs
    assert [status for status, *_ in ours] == [500, 418, 404]
    assert b"caught" in ours[1][2]
