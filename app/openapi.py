"""OpenAPI descriptions of bodies the routes read themselves (for speed), with examples."""

from __future__ import annotations

from pydantic import BaseModel

from .codecs import NPY_TYPE, NPZ_TYPE


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
    from .schemas import ProblemOut

    return {status: {"model": ProblemOut, "content": {"application/problem+json": {}}}
            for status in statuses}


def document_access_errors(app) -> None:
    """Add the 401 and 403 answers to every operation that takes an API key."""
    generate = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = generate()
            for operations in schema["paths"].values():
                for operation in operations.values():
                    if operation.get("security"):
                        responses = operation.setdefault("responses", {})
                        for status, text in (("401", "Missing, unknown or revoked API key"),
                                             ("403", "The API key lacks the scope")):
                            responses.setdefault(status, {
                                "description": text,
                                "content": {"application/problem+json": {
                                    "schema": {"$ref": "#/components/schemas/ProblemOut"}}}})
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi
