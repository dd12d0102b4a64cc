"""OpenAPI descriptions of bodies the routes read themselves (for speed), with examples."""

from __future__ import annotations

from typing import Any, TypedDict

from pydantic import BaseModel

from ..registry.schemas import ProblemOut
from ..wire.decoding import NPY_TYPE, NPZ_TYPE
from .auth import CHECKS, SECURITY_SCHEMES


def _inline(schema: dict, definitions: dict) -> dict:
    if isinstance(schema, dict):
        if "$ref" in schema:
            return _inline(definitions[schema["$ref"].split("/")[-1]], definitions)
        return {key: _inline(value, definitions) for key, value in schema.items()}
    if isinstance(schema, list):
        return [_inline(item, definitions) for item in schema]
    return schema


def json_schema(model: type[BaseModel]) -> dict:
    """The model's JSON schema with its ``$defs`` inlined (valid anywhere in OpenAPI)."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})
    return _inline(schema, definitions)


def body(model: type[BaseModel], *binary: str, description: str | None = None) -> dict:
    schema = json_schema(model)
    examples = schema.pop("examples", None)
    content = {"application/json": {"schema": schema}}
    if examples:
        content["application/json"]["example"] = examples[0]
    binary_docs = {
        NPY_TYPE: "One .npy array (logits by default; `?input=probabilities|scores`); the other "
                  "fields as query parameters.",
        NPZ_TYPE: "An .npz archive with one of `logits`/`probabilities`/`scores` and `labels`; the "
                  "other fields as query parameters (`options` as JSON).",
    }
    for media in binary:
        content[media] = {"schema": {"type": "string", "format": "binary",
                                     "description": binary_docs[media]}}
    request_body = {"required": True, "content": content}
    if description:
        request_body["description"] = description
    return {"requestBody": request_body}


def problems(*statuses: int) -> dict:
    return {status: {"model": ProblemOut, "content": {"application/problem+json": {}}}
            for status in statuses}


V2_ERROR = {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}
ERROR_TEXT = {"400": "Malformed request", "401": "Missing, unknown or revoked API key",
              "403": "The API key lacks the scope", "404": "No such model or version",
              "503": "The database is unreachable (with Retry-After)"}


class RouteDoc(TypedDict):
    """What routes that share their documentation (a latest and a pinned route) pass to the
    router's decorator as ``**doc``."""

    response_model: type
    responses: dict[int | str, dict[str, Any]]
    openapi_extra: dict[str, Any]


def _restore_docs_order(schema: dict, docs_order: list[str]) -> None:
    """List the paths of ``docs_order`` in that order (the order they are written), not the
    order they are matched in (``routes.calibrators`` matches its calibrate routes first)."""
    position: dict[str, int] = {}
    for index, path in enumerate(docs_order):
        position.setdefault(path, index)
    paths = list(schema["paths"])
    written = iter(sorted((p for p in paths if p in position), key=position.__getitem__))
    schema["paths"] = {path: schema["paths"][path] for path in
                       (next(written) if p in position else p for p in paths)}


def _document_security(app, schema: dict) -> None:
    """The API-key schemes, on every operation that depends on ``auth.authorize``."""
    def routes(items):
        for route in items:
            if hasattr(route, "original_router"):  # an included router (FastAPI >= 0.16x)
                yield from routes(route.original_router.routes)
            else:
                yield route

    schema.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
    for route in routes(app.routes):
        if any(dependency.dependency in CHECKS for dependency in getattr(route, "dependencies", [])):
            for method in route.methods:
                schema["paths"][route.path_format][method.lower()]["security"] = [{"ApiKey": []}, {"Bearer": []}]


def document_common_errors(app, docs_order: list[str]) -> None:
    """Add the answers every operation of a kind can give: 401 and 403 where an API key is
    taken, 503 where the database is read; on /v2 the protocol's ``{"error": ...}`` bodies
    (400 for invalid input, never 422)."""
    generate = app.openapi

    def error(status: str, v2: bool) -> dict:
        content = ({"application/json": {"schema": V2_ERROR}} if v2 else
                   {"application/problem+json": {"schema": {"$ref": "#/components/schemas/ProblemOut"}}})
        return {"description": ERROR_TEXT[status], "content": content}

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = generate()
            _restore_docs_order(schema, docs_order)
            _document_security(app, schema)
            for path, operations in schema["paths"].items():
                v2 = path.startswith("/v2/models")
                for operation in operations.values():
                    responses = operation.setdefault("responses", {})
                    statuses = ["401", "403"] if operation.get("security") else []
                    if path.startswith("/v1") or v2:
                        statuses.append("503")
                    if v2:
                        responses.pop("422", None)
                        statuses += ["400", "404"]
                    for status in statuses:
                        responses.setdefault(status, error(status, v2))
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi
