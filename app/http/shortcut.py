"""The hot path's routes (calibrate, ``/v2`` infer) without FastAPI's router and dependency
solver: ``Shortcut`` does their routing as plain ASGI, ``install_shortcut``
puts it around the app router's own stack. Where their blocking work then runs is
``app.http.hot_path``'s.
"""

from __future__ import annotations

import math
import re

from annotated_types import Ge, Le
from fastapi import FastAPI, Request
from starlette._utils import get_route_path

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
    share of a small calibrate call (docs/benchmarks.md, "Design figures"). It wraps the router's
    own stack, inside the exception middleware, so a check's or the endpoint's error becomes the
    same response.

    Routes are read as the app serves them (``fastapi.routing.iter_route_contexts``: with the
    dependencies added where a router is included or on the app), and one is taken only if all
    its dependencies are access checks and nothing else (no body limit of its own, no other
    parameters); while ``app.dependency_overrides`` holds anything, every request goes to the
    router. Everything else, and any parameter the shortcut cannot read exactly as FastAPI would
    (a version that is not a plain decimal in range), goes to the router unchanged. The calibrate
    routes are the router's first, so no other route could have taken these requests."""

    def __init__(self, app: FastAPI, router_stack, contexts, checks: set):
        self.app, self.router_stack = app, router_stack
        self.routes = []
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
            self.routes.append((context.original_route, context.path_regex, context.endpoint, converters, calls))

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST" and not self.app.dependency_overrides:
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
                scope.setdefault("router", self.app.router)
                request = Request(scope, receive, send)
                for check in checks:
                    await check(request)
                response = await endpoint(request, **params)
                await response(scope, receive, send)
                return
        await self.router_stack(scope, receive, send)


def _holds(route, routes) -> bool:
    """Whether ``route`` is one of ``routes`` or an included router with one of them inside."""
    included = getattr(route, "original_router", None)
    if included is None:
        return route in routes
    return any(_holds(inner, routes) for inner in included.routes)


def install_shortcut(app: FastAPI, routes) -> None:
    """Put a ``Shortcut`` for ``routes`` (as the routers declare them) around the app router's own
    stack; with a FastAPI that cannot say how it serves a route (no ``iter_route_contexts``),
    none: the router serves them, only slower."""
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
    router.middleware_stack = app.state.shortcut = Shortcut(app, router.middleware_stack, contexts, CHECKS)
