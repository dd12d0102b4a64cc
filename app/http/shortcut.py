"""The hot path's routes (calibrate, ``/v2`` infer) without FastAPI's router, dependency solver and
inner middleware: ``Shortcut`` does their routing and error handling as plain ASGI,
``install_shortcut`` makes it the innermost user middleware. Where their blocking work then runs is
``app.http.hot_path``'s.
"""

from __future__ import annotations

import math
import re
from typing import Any

from annotated_types import Ge, Le
from fastapi import FastAPI, Request
from starlette._exception_handler import _lookup_exception_handler
from starlette._utils import get_route_path, is_async_callable
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

DECIMAL = re.compile(r"[1-9][0-9]{0,9}")


def _path_converter(field):
    """A path parameter's text -> its value, exactly as FastAPI would validate it, or ``None``
    where the shortcut leaves the request to FastAPI (which then answers it, 422s included);
    ``False`` for a parameter the shortcut cannot judge."""
    annotation, metadata = field.field_info.annotation, field.field_info.metadata
    if annotation is str and not metadata:
        return lambda text: text
    if annotation is int and {type(m) for m in metadata} <= {Ge, Le}:
        low = max([m.ge for m in metadata if isinstance(m, Ge)], default=-math.inf)
        high = min([m.le for m in metadata if isinstance(m, Le)], default=math.inf)
        # only plain decimals: what pydantic reads otherwise (" 7", "0x7", "7.0", ...) is FastAPI's
        return lambda text: int(text) if DECIMAL.fullmatch(text) and low <= int(text) <= high else None
    return False


class Shortcut:
    """The router's own work for the hot path's routes (calibrate, ``/v2`` infer), as plain ASGI:
    a ``POST`` whose path is one of theirs goes straight to its endpoint, after the route's access
    checks (``auth.authorize``: they take only the request), with the scope FastAPI would give it
    (``route``, ``endpoint``, ``path_params``), without FastAPI's router and dependency resolution
    (the included-router matching, the dependency solver, two exit stacks), whose cost is a fair
    share of a small calibrate call (docs/benchmarks.md, "Design figures"). It is the innermost
    user middleware, so it also skips the layers FastAPI puts inside those (the exception
    middleware and its exit stack): an exception of a check or the endpoint becomes the response
    of the app's handler for it, chosen by Starlette's own rule (a status handler for an
    ``HTTPException``'s code, else the handler of the nearest class in the exception's MRO); one
    without a handler goes on to the server-error middleware, as from the exception middleware.

    Routes are read as the app serves them (``fastapi.routing.iter_route_contexts``: with the
    dependencies added where a router is included or on the app), and one is taken only if all
    its dependencies are access checks and nothing else (no body limit of its own, no other
    parameters); while ``app.dependency_overrides`` holds anything, every request goes to the
    router. Everything else, and any parameter the shortcut cannot read exactly as FastAPI would
    (a version that is not a plain decimal in range), goes on unchanged. The calibrate routes are
    the router's first, so no other route could have taken these requests."""

    def __init__(self, app, fastapi_app: FastAPI, routes: list):
        self.app, self.fastapi, self.routes = app, fastapi_app, routes  # ``app``: the next layer
        # as FastAPI's exception middleware takes them: 500 and Exception are the server-error
        # middleware's
        handlers: dict[Any, Any] = {key: value for key, value in fastapi_app.exception_handlers.items()
                                    if key not in (500, Exception)}
        self.status_handlers = {key: value for key, value in handlers.items() if isinstance(key, int)}
        self.class_handlers = {key: value for key, value in handlers.items() if not isinstance(key, int)}

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST" and not self.fastapi.dependency_overrides:
            path = get_route_path(scope)
            for route, path_regex, endpoint, converters, checks in self.routes:
                match = path_regex.match(path)
                if match is None:
                    continue
                params = {name: converters[name](text) for name, text in match.groupdict().items()}
                if None in params.values():
                    break
                scope["route"], scope["endpoint"] = route, endpoint
                scope["path_params"] = {**scope.get("path_params", {}), **params}
                scope.setdefault("router", self.fastapi.router)
                request = Request(scope, receive, send)
                try:
                    for check in checks:
                        await check(request)
                    response = await endpoint(request, **params)
                except Exception as exc:
                    response = await self._handled(request, exc)
                if response is not None:
                    await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _handled(self, request: Request, exc: Exception):
        """The app's response to ``exc``, by Starlette's rule; ``exc`` itself where none answers it."""
        handler: Any = self.status_handlers.get(exc.status_code) if isinstance(exc, HTTPException) else None
        if handler is None:
            handler = _lookup_exception_handler(self.class_handlers, exc)
        if handler is None:
            raise exc
        response = await handler(request, exc) if is_async_callable(handler) else \
            await run_in_threadpool(handler, request, exc)
        exc.__traceback__ = None  # as Starlette, once answered: a reused exception would pile up tracebacks
        return response


def hot_routes(contexts, checks: set) -> list:
    """The routes of ``contexts`` (``iter_route_contexts``) the shortcut can take, as
    ``(route, path regex, endpoint, path converters, access checks)``."""
    routes = []
    for context in contexts:
        dependant = context.dependant
        converters = {field.name: _path_converter(field) for field in dependant.path_params}
        calls = [sub.call for sub in dependant.dependencies]
        if (context.methods != {"POST"} or False in converters.values() or not set(calls) <= checks
                or getattr(context, "max_body_size", None) is not None
                or any(sub.dependencies or sub.path_params or sub.query_params or sub.header_params
                       or sub.cookie_params or sub.body_params for sub in dependant.dependencies)
                or dependant.query_params or dependant.header_params or dependant.cookie_params
                or dependant.body_params or dependant.request_param_name != "request"):
            continue
        routes.append((context.original_route, context.path_regex, context.endpoint, converters, calls))
    return routes


def _holds(route, routes) -> bool:
    """Whether ``route`` is one of ``routes`` or an included router with one of them inside."""
    included = getattr(route, "original_router", None)
    if included is None:
        return route in routes
    return any(_holds(inner, routes) for inner in included.routes)


def install_shortcut(app: FastAPI, routes) -> None:
    """Add a ``Shortcut`` for ``routes`` (as the routers declare them) as the app's innermost user
    middleware (call it before adding any other), the routes it takes in ``app.state.hot_routes``;
    with a FastAPI that cannot say how it serves a route (no ``iter_route_contexts``), none: the
    router serves them, only slower."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # pragma: no cover - an older FastAPI
        return
    from .auth import CHECKS

    router = app.router
    # only the included routers that hold one of ``routes``: reading a router's routes as served
    # builds every one of them (FastAPI builds them lazily, per included router, on first use)
    holding = [route for route in router.routes if _holds(route, routes)]
    contexts = [context for context in iter_route_contexts(holding) if context.original_route in routes]
    app.state.hot_routes = hot_routes(contexts, CHECKS)
    app.add_middleware(Shortcut, fastapi_app=app, routes=app.state.hot_routes)
