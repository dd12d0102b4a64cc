"""The service and the numeric core type-check: mypy, as pyproject.toml's ``[tool.mypy]`` configures
it (``app`` and ``calibration``, pydantic's plugin), reports no error.

mypy runs in a process of its own: run in the test process (``mypy.api``), it leaves that process
holding its whole program's objects, with the cyclic collector's permanent generation emptied
(``gc.unfreeze``), and every later test in the process then pays for them (0.04 -> 0.7 s a test)."""

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_reports_no_error():
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"mypy exited with {done.returncode}:\n{done.stdout}{done.stderr}"


def _skipped(module: str, patterns: list[str]) -> bool:
    return any(module == p or (p.endswith(".*") and module.startswith(p[:-1])) for p in patterns)


def test_no_module_mypy_skips_is_imported_by_the_checked_code():
    """A module under ``follow_imports = "skip"`` is ``Any`` to mypy, so the code it checks may import
    none of them but torch (its one device backend's calls, typed by hand)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    patterns = [
        module
        for override in config["overrides"]
        if override.get("follow_imports") == "skip"
        for module in override["module"]
        if module.split(".")[0] != "torch"
    ]
    assert "sqlalchemy.dialects.oracle.*" in patterns and "rich" in patterns
    imported = set()
    for top in config["files"]:
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    imported |= {(a.name, path.relative_to(ROOT).as_posix()) for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    imported |= {(f"{node.module}.{a.name}", path.relative_to(ROOT).as_posix()) for a in node.names}
                    imported.add((node.module, path.relative_to(ROOT).as_posix()))
    assert len(imported) > 300
    assert sorted((m, where) for m, where in imported if _skipped(m, patterns)) == []
