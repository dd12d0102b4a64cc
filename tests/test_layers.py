"""The architecture of DESIGN.md, read from the source: one-way layers and no import circles.

``app`` is a package per domain over ``platform`` and ``wire``, under ``http``: imports point one way,
``platform`` <- ``wire`` <- domains <- ``http`` (a domain's ``routes`` module is part of the HTTP edge);
a domain uses another domain's service, never its store or rows; one wiring module knows every
domain. The HTTP edge (``app/http``, each domain's ``routes``) is the only code that imports FastAPI
or Starlette; the service imports no wire format; the core imports nothing of the service or its
frameworks at module level; ``app`` uses the core through ``calibration``'s exported names
(``calibration.__all__``); and no module of ``app``, ``calibration`` or ``calibration_client``
imports another that imports it back, even inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

ROOTS = ("app", "calibration")
#: the parts of the product, each a package of ``app`` with the same file names
DOMAINS = ("access", "comparisons", "conformal", "dashboard", "jobs", "monitoring", "observations", "oip",
           "prediction_log", "promotion", "registry")
#: the layers under and over the domains, by rank: a module imports only modules of its rank or below
RANKS = {"platform": 0, "settings": 0, "wire": 1, **dict.fromkeys(DOMAINS, 2), "http": 3,
         "main": 4, "cli": 4, "worker": 4, "wiring": 4}
#: the modules that build every service from the settings (and so know every domain)
WIRING = {"app.wiring", "app.http.application"}
#: imports that break the rules today, each to go through the owning domain's service; the list may
#: only shrink (a test checks that every entry is still a real import)
KNOWN_LAYER_BREAKS = {("app.wire.batches", "app.prediction_log.service")}
KNOWN_STORE_IMPORTS = {
    ("app.access.keys", "app.registry.store"),
    ("app.monitoring.alarms", "app.observations.store"),
    ("app.monitoring.alarms", "app.registry.store"),
    ("app.monitoring.power", "app.observations.store"),
    ("app.monitoring.power", "app.registry.store"),
    ("app.monitoring.quality", "app.observations.store"),
    ("app.monitoring.quality", "app.registry.store"),
    ("app.monitoring.store", "app.observations.store"),
    ("app.monitoring.webhooks", "app.registry.store"),
    ("app.observations.online_updates", "app.registry.store"),
    ("app.observations.service", "app.prediction_log.store"),
    ("app.observations.service", "app.registry.store"),
    ("app.prediction_log.epoch_store", "app.observations.store"),
    ("app.prediction_log.lookup", "app.observations.store"),
    ("app.prediction_log.lookup", "app.registry.store"),
    ("app.prediction_log.pipe", "app.observations.store"),
    ("app.prediction_log.service", "app.observations.store"),
    ("app.prediction_log.service", "app.registry.store"),
    ("app.prediction_log.store", "app.observations.store"),
    ("app.promotion.evaluations", "app.registry.store"),
    ("app.promotion.policies", "app.monitoring.rows"),
    ("app.promotion.store", "app.registry.store"),
    ("app.registry.store", "app.promotion.rows"),
    # the dashboard's health reads (trajectories, alarm windows, evaluations) go to four stores
    ("app.dashboard.reads", "app.monitoring.store"),
    ("app.dashboard.reads", "app.observations.store"),
    ("app.dashboard.reads", "app.promotion.store"),
    ("app.dashboard.reads", "app.registry.store"),
}
KNOWN_BROAD_MODULES = {"app.registry.service"}
#: core modules outside ``calibration.__all__`` that the service imports today (to be exported or wrapped)
KNOWN_CORE_MODULES = {("app.monitoring.alarms", "label_free"), ("app.monitoring.alarms", "monitoring"),
                      ("app.monitoring.power", "power"), ("app.monitoring.quality", "label_shift"),
                      ("app.monitoring.quality", "prior_shift"), ("app.monitoring.quality", "quality_plot"),
                      ("app.registry.prior_shift", "label_shift"), ("app.dashboard.reads", "monitoring")}


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
