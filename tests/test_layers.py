"""The architecture of DESIGN.md, read from the source: one-way layers and no import circles.

``app`` is a package per domain over ``platform`` and ``wire``, under ``http``: imports point one way,
``platform`` <- ``wire`` <- domains <- ``http`` (a domain's ``routes`` module is part of the HTTP edge);
a domain uses another domain's service, never its store or rows; one wiring module knows every
domain. The HTTP edge (``app/http``, each domain's ``routes``) is the only code that imports FastAPI
or Starlette; services take domain values, not request models (pydantic stays at the edge, in the
schemas and in the wire's decoding); the service imports no wire format; the core imports nothing of
the service or its frameworks at module level; ``app`` uses the core through ``calibration``'s
exported names (``calibration.__all__``); and no module of ``app``, ``calibration`` or ``calibration_client``
imports another that imports it back, even inside a function. The client imports neither the
service nor the core; no folder of the service or the client holds more than 15 modules, no module
more than 300 lines; the service's tests sit in a folder of their kind and no test module imports
another."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

ROOTS = ("app", "calibration")
#: the parts of the product, each a package of ``app`` with the same file names
DOMAINS = ("access", "comparisons", "conformal", "dashboard", "jobs", "monitoring", "observations", "oip",
           "prediction_log", "promotion", "registry")
#: the layers under and over the domains, by rank: a module imports only modules of its rank or below
RANKS = {"platform": 0, "settings": 0, "wire": 1, **dict.fromkeys(DOMAINS, 2), "http": 3,
         "main": 4, "cli": 4, "worker": 4, "wiring": 4, "all_rows": 4}
#: the modules that know every domain: the wiring, which builds every service from the settings, and
#: ``app.all_rows``, which imports every domain's rows for the metadata Alembic compares
WIRING = {"app.wiring", "app.all_rows"}
#: imports that break the rules, each to go through the owning domain's service or read API: none today,
#: and the sets stay empty (a test checks that every entry would still be a real import)
KNOWN_LAYER_BREAKS: set[tuple[str, str]] = set()
KNOWN_STORE_IMPORTS: set[tuple[str, str]] = set()
KNOWN_BROAD_MODULES: set[str] = set()
#: core modules outside ``calibration.__all__`` that the service imports (none: what it needs is exported)
KNOWN_CORE_MODULES: set[tuple[str, str]] = set()


def module_files(roots: tuple[str, ...] = ROOTS) -> dict[str, Path]:
    modules = {}
    for root in roots:
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
    return name.startswith("app.http") or name.rpartition(".")[2] == "routes"


def test_only_the_routes_import_the_web_framework():
    offenders = {name for name, path in module_files().items()
                 if name.startswith("app.") and not is_http_edge(name)
                 and any(i.split(".")[0] in ("fastapi", "starlette") for i in imported_names(name, path))}
    assert offenders == set()


def is_schema_module(name: str) -> bool:
    """A module of request and response models: ``schemas``, or ``<part>_schemas``."""
    return any(part == "schemas" or part.endswith("_schemas") for part in name.split("."))


#: the modules besides the HTTP edge and the schemas modules that may import pydantic: the settings
#: (pydantic-settings) and the wire's decoding (which validates a body's fields with a request model)
PYDANTIC_MODULES = {"app.settings", "app.wire.decoding"}


def test_services_take_values_not_request_models():
    """Routes know HTTP and pydantic; services, stores and jobs work on domain values (frozen
    dataclasses, each domain's ``values``): outside the HTTP edge, the schemas modules and
    ``PYDANTIC_MODULES``, no module of ``app`` imports pydantic or a schemas module."""
    found = {(name, imported) for name, path in module_files(("app",)).items()
             if not is_http_edge(name) and not is_schema_module(name) and name not in PYDANTIC_MODULES
             for imported in imported_names(name, path)
             if imported.split(".")[0] in ("pydantic", "pydantic_settings") or is_schema_module(imported)}
    assert {name for name, _ in found} == set(), sorted(found)


def test_the_service_and_the_store_know_no_wire_format():
    modules = module_files()
    for name in ("app.registry.service", "app.registry.store", "app.jobs.runner", "app.jobs.store"):
        imports = imported_names(name, modules[name])
        wire = {"app.wire.codecs", "app.wire.decoding", "app.wire.encoding", "app.oip", "app.oip.protocol", "app.http"}
        assert not imports & wire, name


def test_the_core_imports_no_service_framework_at_module_level():
    forbidden = ("app", "fastapi", "starlette", "pydantic", "sqlalchemy", "torch")
    for name, path in module_files().items():
        if name.startswith("calibration"):
            assert not {i for i in imported_names(name, path, top_level_only=True)
                        if i.split(".")[0] in forbidden}, name


RARE = ("scipy.stats", "scipy.signal", "scipy.optimize", "scipy.linalg", "scipy.sparse", "scipy.special",
        "torch", "alembic", "procrastinate", "matplotlib")


@pytest.mark.parametrize(("module", "heavy"), [
    ("app.main", RARE),
    ("app.prediction_log.process", (*RARE, "calibration", "fastapi", "starlette", "pydantic", "app.registry.service")),
])
def test_starting_the_service_loads_no_heavy_module_that_only_a_rare_path_needs(module, heavy):
    """Every server, worker and test process imports ``app.main``: scipy.stats and scipy.signal
    (power intervals, the prior-shift test, long drift signals), scipy.optimize, scipy.linalg,
    scipy.sparse and scipy.special (fits, Wilson intervals), torch (its backend), alembic
    (migrations), procrastinate (jobs) and matplotlib (figures) are imported where they are used,
    not at start. The prediction log's writer process, started beside every server, needs neither
    those nor the core, the web framework or the registry's services: only the log's store."""
    loaded = subprocess.run(
        [sys.executable, "-c", f"import sys, {module}; print([m for m in {heavy!r} if m in sys.modules])"],
        cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"


def test_the_service_uses_the_core_through_its_exported_names():
    for name, path in module_files().items():
        if name.startswith("app"):
            assert not {i for i in imported_names(name, path) if (i.startswith("calibration.") and i.count(".") > 1)
                        or i.split(".")[:2] == ["calibration", "backend"]}, name
            source = path.read_text()
            assert "cal.inputs." not in source and "cal.backend." not in source, name


def test_no_import_circles():
    modules = module_files((*ROOTS, "calibration_client"))
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


def app_imports() -> dict[str, set[str]]:
    """Each module of ``app`` with the modules of ``app`` it imports (anywhere in it)."""
    modules = module_files(("app",))
    found = {}
    for name, path in modules.items():
        targets = set()
        for imported in imported_names(name, path):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported not in ("", "app", name):
                targets.add(imported)
        found[name] = targets
    return found


def rank(name: str) -> int:
    part = name.split(".")[1]
    if part in DOMAINS and name.rpartition(".")[2] == "routes":
        return RANKS["http"]
    return RANKS[part]


def test_every_module_sits_in_a_layer_or_a_domain():
    assert {name for name in app_imports() if name != "app" and name.split(".")[1] not in RANKS} == set()


def test_imports_point_one_way():
    """platform <- wire <- domains <- http: nothing imports a module of a higher layer."""
    breaks = {(name, target) for name, targets in app_imports().items() if name != "app"
              for target in targets if rank(target) > rank(name)}
    assert breaks == KNOWN_LAYER_BREAKS


def test_a_domain_uses_another_only_through_its_service():
    """Never another domain's store or rows (its routes may read its schemas, as the API shows them)."""
    found = set()
    for name, targets in app_imports().items():
        if name == "app" or name.split(".")[1] not in DOMAINS or name.endswith(".routes"):
            continue
        for target in targets:
            domain, module = target.split(".")[1], target.rpartition(".")[2]
            if domain in DOMAINS and domain != name.split(".")[1] and module.endswith(("store", "rows")):
                found.add((name, target))
    assert found == KNOWN_STORE_IMPORTS


def test_only_the_wiring_knows_every_domain():
    """Only the wiring imports every domain; no other module imports more than half of them."""
    broad = set()
    for name, targets in app_imports().items():
        domains = {target.split(".")[1] for target in targets} & set(DOMAINS)
        if name not in WIRING and len(domains) > len(DOMAINS) // 2:
            broad.add(name)
    assert broad == KNOWN_BROAD_MODULES


def test_the_service_imports_only_exported_names_of_the_core():
    """``from calibration import monitoring`` reaches a module outside ``calibration.__all__``."""
    tree = ast.parse((REPO / "calibration" / "__init__.py").read_text())
    exported = next({element.value for element in node.value.elts} for node in tree.body
                    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__")
    found = set()
    for name, path in module_files(("app",)).items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "calibration" and not node.level:
                found.update((name, alias.name) for alias in node.names if alias.name not in exported)
    assert found == KNOWN_CORE_MODULES



#: what the client may import besides the standard library: its own package and the ``client``
#: extra's packages (httpx, typer, rich) with numpy; never the service or the core, so that it
#: installs and runs without them
CLIENT_IMPORTS = {"calibration_client", "httpx", "numpy", "typer", "rich"}
#: the most modules one folder of the service or the client holds side by side (the core's flat list
#: of methods and metrics is its design)
MAX_MODULES_PER_FOLDER = 15
#: the most lines one module of the service, the core or the client holds
MAX_MODULE_LINES = 300
#: modules over ``MAX_MODULE_LINES`` today, each to be split by job; the set may only shrink (now empty)
KNOWN_LONG_MODULES: set[str] = set()


def test_the_client_imports_neither_the_service_nor_the_core():
    found = {(name, imported) for name, path in module_files(("calibration_client",)).items()
             for imported in imported_names(name, path)
             if imported.split(".")[0] not in CLIENT_IMPORTS | set(sys.stdlib_module_names)}
    assert found == set()


def test_no_folder_holds_more_than_fifteen_modules():
    folders: dict[str, int] = {}
    for path in module_files((*ROOTS, "calibration_client")).values():
        folder = path.parent.relative_to(REPO).as_posix()
        if path.name != "__init__.py" and folder.split("/")[0] != "calibration":
            folders[folder] = folders.get(folder, 0) + 1
    assert {folder: n for folder, n in folders.items() if n > MAX_MODULES_PER_FOLDER} == {}


def test_no_module_is_longer_than_three_hundred_lines():
    long = {path.relative_to(REPO).as_posix() for path in module_files((*ROOTS, "calibration_client")).values()
            if len(path.read_text().splitlines()) > MAX_MODULE_LINES}
    assert long <= KNOWN_LONG_MODULES, sorted(long - KNOWN_LONG_MODULES)

#: the kinds of service tests, a folder of ``tests/service`` each: what a test of the kind may run
SERVICE_TEST_KINDS = ("unit", "api", "live", "migrations", "fuzz")


def modules_of_tests(folder: Path) -> dict[str, Path]:
    return {".".join(path.relative_to(REPO).with_suffix("").parts): path for path in sorted(folder.rglob("test_*.py"))}


def test_the_service_tests_sit_in_the_folder_of_their_kind():
    """unit: no HTTP app; api: the app in process, no server process; live: real server and worker
    processes; migrations; fuzz: hostile input, hypothesis and schemathesis."""
    service = REPO / "tests" / "service"
    assert {path.parent.relative_to(service).as_posix() for path in modules_of_tests(service).values()} \
        <= set(SERVICE_TEST_KINDS)
    no_app = {"app.main", "app.main.create_app", "starlette.testclient", "fastapi.testclient"}
    for name, path in modules_of_tests(service / "unit").items():
        assert not imported_names(name, path) & (no_app | {"tests.service.support.live"}), name
    for name, path in modules_of_tests(service / "api").items():
        assert not {i for i in imported_names(name, path) if i.startswith("tests.service.support.live")}, name


def test_no_test_module_imports_another():
    """What tests share lives in ``tests/helpers.py``, ``tests/support``, ``tests/service/support`` or a
    conftest."""
    found = {(name, imported) for name, path in modules_of_tests(REPO / "tests").items()
             for imported in imported_names(name, path)
             if imported.startswith("tests.") and any(part.startswith("test_") for part in imported.split("."))}
    assert found == set()


def test_the_longest_first_list_names_test_files():
    from tests.conftest import LONGEST_FIRST

    assert [path for path in LONGEST_FIRST if not (REPO / path).is_file()] == []


def test_the_workers_take_files_in_the_longest_first_order(pytestconfig):
    """pytest-xdist re-sorts a ``--dist loadfile`` queue by the number of tests in each file unless told
    not to, which hands out the long files of few tests (the fuzz run, mypy, the docs' examples) last,
    where one of them runs alone while the other workers are idle: the suite's options turn that off,
    so the queue is ``LONGEST_FIRST``'s order."""
    assert pytestconfig.getoption("loadscopereorder") is False


def test_the_torch_files_are_the_test_files_that_import_torch():
    """``TORCH_FILES`` (one ``--dist loadfile`` work unit, so one worker imports torch) names every
    test file that imports it: ``import torch``, ``require("torch")`` or ``importorskip("torch")``, or
    an application on a torch device (this file names them only to find them)."""
    from tests.conftest import TORCH_FILES

    pattern = re.compile(r'^\s*(import|from) torch\b|(require|importorskip)\("torch"\)|"torch-cpu"', re.M)
    importing = sorted(path.relative_to(REPO).as_posix() for path in (REPO / "tests").rglob("test_*.py")
                       if path != Path(__file__) and pattern.search(path.read_text(encoding="utf-8")))
    assert sorted(TORCH_FILES) == importing
