"""The architecture of DESIGN.md, read from the source: one-way layers and no import circles.

Routes (``app/routes``) are the only modules that import FastAPI or Starlette; the service
imports no wire format; the core imports nothing of the service or its frameworks at module
level; ``app`` uses the core through ``calibration``'s exported names; and no module imports
another that imports it back, even inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

ROOTS = ("app", "calibration")


def module_files() -> dict[str, Path]:
    modules = {}
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    return modules


def imported_names(name: str, path: Path, top_level_only: bool = False) -> set[str]:
    """Every module name ``name`` imports (absolute, with imported attributes appended)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def is_http_edge(name: str) -> bool:
    """The HTTP edge: ``app.http`` (the application, middleware, problems, auth, ...) and each domain's
    ``routes`` module."""
    return (name.startswith(("app.http", "app.routes")) or name.rpartition(".")[2] == "routes"
            or name == "app.http.forms")


def test_only_the_routes_import_the_web_framework():
    offenders = {name for name, path in module_files().items()
                 if name.startswith("app.") and not is_http_edge(name)
                 and any(i.split(".")[0] in ("fastapi", "starlette") for i in imported_names(name, path))}
    assert offenders == set()


def test_the_service_and_the_store_know_no_wire_format():
    modules = module_files()
    for name in ("app.registry.service", "app.registry.store", "app.jobs.runner", "app.jobs.store"):
        imports = imported_names(name, modules[name])
        wire = {"app.wire.codecs", "app.wire.decoding", "app.wire.encoding", "app.oip.protocol", "app.routes"}
        assert not imports & wire, name


def test_the_core_imports_no_service_framework_at_module_level():
    forbidden = ("app", "fastapi", "starlette", "pydantic", "sqlalchemy", "torch")
    for name, path in module_files().items():
        if name.startswith("calibration"):
            assert not {i for i in imported_names(name, path, top_level_only=True)
                        if i.split(".")[0] in forbidden}, name


def test_the_service_uses_the_core_through_its_exported_names():
    for name, path in module_files().items():
        if name.startswith("app"):
            assert not {i for i in imported_names(name, path) if (i.startswith("calibration.") and i.count(".") > 1)
                        or i.split(".")[:2] == ["calibration", "backend"]}, name
            source = path.read_text()
            assert "cal.inputs." not in source and "cal.backend." not in source, name


def test_no_import_circles():
    modules = module_files()
    graph = {}
    for name, path in modules.items():
        edges = set()
        for imported in imported_names(name, path):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name and not imported.startswith(name + "."):
                edges.add(imported)
        graph[name] = edges
    circles = []

    def visit(node, trail):
        for nxt in graph[node]:
            if nxt in trail:
                circles.append([*trail[trail.index(nxt):], nxt])
            elif nxt not in done:
                visit(nxt, [*trail, nxt])
        done.add(node)

    done: set[str] = set()
    for module in graph:
        if module not in done:
            visit(module, [module])
    assert circles == []
