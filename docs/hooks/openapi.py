"""MkDocs hooks: the HTTP API reference made from the service's own OpenAPI document at build time,
every ``calibration`` command's ``--help``
(no network, no JavaScript renderer), the document itself served next to the pages as
``openapi.json``, and ``architecture.md`` put in the navigation when the page exists."""

from __future__ import annotations

import json
from pathlib import Path

MARKER = "<!-- openapi-reference -->"
CLI_MARKER = "<!-- cli-reference -->"
METHODS = ("get", "put", "post", "patch", "delete")


def _document() -> dict:
    from app.main import create_app
    from app.settings import Settings

    return create_app(Settings(database_url="sqlite://")).openapi()


def _cell(text) -> str:
    return " ".join(str(text or "").split()).replace("|", "\\|")


def _type(schema: dict) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"array of {_type(schema.get('items', {}))}"
    return str(schema.get("type", "any"))


def _operation(method: str, path: str, operation: dict) -> list[str]:
    out = [f"### `{method.upper()} {path}`", ""]
    if operation.get("summary"):
        out += [f"**{_cell(operation['summary'])}**", ""]
    if operation.get("description"):
        out += ["```text", operation["description"].strip(), "```", ""]
    parameters = operation.get("parameters", [])
    if parameters:
        out += ["| parameter | in | required | type | description |", "|---|---|---|---|---|"]
        out += [f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | "
                f"{_cell(_type(p.get('schema', {})))} | {_cell(p.get('description'))} |" for p in parameters]
        out.append("")
    body = operation.get("requestBody", {}).get("content", {})
    if body:
        kinds = ", ".join(f"`{kind}`" + (f" ({_type(c['schema'])})" if c.get("schema") else "")
                          for kind, c in body.items())
        out += [f"Request body: {kinds}", ""]
    responses = operation.get("responses", {})
    if responses:
        out += ["| status | meaning |", "|---|---|"]
        out += [f"| {code} | {_cell(r.get('description'))} |" for code, r in responses.items()]
        out.append("")
    return out


def _schemas(components: dict) -> list[str]:
    out = ["## Schemas", ""]
    for name, schema in sorted(components.items()):
        out += [f"### {name}", ""]
        if schema.get("description"):
            out += ["```text", schema["description"].strip(), "```", ""]
        properties = schema.get("properties", {})
        if properties:
            required = set(schema.get("required", []))
            out += ["| field | type | required | description |", "|---|---|---|---|"]
            out += [f"| `{field}` | {_cell(_type(p))} | {'yes' if field in required else 'no'} | "
                    f"{_cell(p.get('description'))} |" for field, p in properties.items()]
            out.append("")
    return out


def reference(document: dict) -> str:
    """Markdown of every operation (grouped by path, in the document's order) and every schema."""
    out = [f"OpenAPI {document['openapi']}, {document['info']['title']} {document['info']['version']}: "
           "[openapi.json](openapi.json), the document this section is made from.", ""]
    for path, item in document["paths"].items():
        for method in METHODS:
            if method in item:
                out += _operation(method, path, item[method])
    out += _schemas(document.get("components", {}).get("schemas", {}))
    return "\n".join(out)


def on_config(config):
    if (Path(config["docs_dir"]) / "architecture.md").exists():
        nav = config["nav"]
        at = next((i for i, entry in enumerate(nav) if "Layout and design" in entry), len(nav))
        nav.insert(at, {"Architecture": "architecture.md"})
    return config


def _help(runner, app, words: list[str]) -> str:
    said = runner.invoke(app, [*words, "--help"], env={"COLUMNS": "100", "TERM": "dumb", "NO_COLOR": "1"})
    assert said.exit_code == 0, said.output
    return "\n".join(line.rstrip() for line in said.output.strip().splitlines())


def cli_reference() -> str:
    """Each command's ``--help`` (subcommands of a group included), as the command line prints it."""
    import typer
    from typer.testing import CliRunner

    from calibration_client.cli import app

    runner, out = CliRunner(), ["```text", _help(CliRunner(), app, []), "```", ""]
    group = typer.main.get_command(app)
    for name, command in group.commands.items():
        words = [name, *sorted(getattr(command, "commands", {}))]
        for sub in ([[name]] if len(words) == 1 else [[name, w] for w in words[1:]]):
            out += [f"### `calibration {' '.join(sub)}`", "", "```text", _help(runner, app, sub), "```", ""]
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files):
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, reference(_document()))
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    return markdown


def on_files(files, config):
    from mkdocs.structure.files import File

    files.append(File.generated(config, "openapi.json", content=json.dumps(_document(), indent=1)))
    return files
