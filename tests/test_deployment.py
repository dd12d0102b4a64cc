"""The README's commands, CI, the Dockerfile and the compose file stay true to the code."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from app.cli import parser
from app.main import create_app
from app.settings import Settings
from tests.helpers import REPO

_spec = importlib.util.spec_from_file_location("deployment_smoke", REPO / "scripts" / "deployment_smoke.py")
smoke = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(smoke)

SETTINGS_VARIABLES = {("DATABASE_URL" if name == "database_url" else f"CALIBRATION_{name.upper()}")
                      for name in Settings.model_fields}
CLI_COMMANDS = set(parser()._subparsers._group_actions[0].choices)


def _read(name: str) -> str:
    return (REPO / name).read_text()


def _compose() -> dict:
    return yaml.safe_load(_read("docker-compose.yml"))


def test_readme_opens_with_the_two_commands_ci_runs():
    readme = _read("README.md")
    blocks = re.findall(r"```sh\n(.*?)```", readme, re.S)
    assert blocks[0].strip() == "make serve" and blocks[1].strip() == "make test"
    ci = _read(".ci/run")
    assert re.search(r"^make test$", ci, re.M)
    makefile = _read("Makefile")
    assert "$(VENV)/bin/calibration-service serve" in makefile
    assert "$(VENV)/bin/ruff check ." in makefile and "$(VENV)/bin/python -m pytest" in makefile


def test_the_operations_page_documents_every_setting():
    """The settings table lives in docs/operations.md (the README links to it)."""
    readme = _read("docs/operations.md")
    documented = set(re.findall(r"^\| `([A-Z_]+)` \|", readme, re.M))
    assert documented == SETTINGS_VARIABLES


def test_compose_and_dockerfile_use_real_variables_and_commands():
    compose = _compose()
    for name, service in compose["services"].items():
        for variable in (service.get("environment") or {}):
            if name != "postgres":
                assert variable in SETTINGS_VARIABLES, f"{name} sets unknown {variable}"
        command = service.get("command")
        if command and command[0] == "calibration-service":
            assert command[1] in CLI_COMMANDS
    assert compose["services"]["api"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert "pg_isready" in " ".join(compose["services"]["postgres"]["healthcheck"]["test"])
    dockerfile = _read("Dockerfile")
    for variable in re.findall(r"\b(CALIBRATION_[A-Z_]+)=", dockerfile):
        assert variable in SETTINGS_VARIABLES
    assert 'CMD ["calibration-service", "serve"]' in dockerfile
    assert re.search(r"^USER (?!root)", dockerfile, re.M)
    health_path = re.search(r"127\.0\.0\.1:8000(/\w+)", dockerfile).group(1)
    assert health_path in create_app(Settings(database_url="sqlite://")).openapi()["paths"]


def test_dockerfile_installs_like_ci():
    dockerfile, makefile = _read("Dockerfile"), _read("Makefile")
    image_extras = re.search(r"^RUN scripts/install /opt/venv (\S+)$", dockerfile, re.M).group(1)
    assert "scripts/install $(VENV) $(TEST_EXTRAS) editable" in makefile
    assert f"SERVE_EXTRAS = {image_extras}\n" in makefile  # the image installs what `make serve` does


def test_the_build_stage_copies_everything_pip_install_reads():
    """pip install . in the image's build stage reads pyproject.toml, the readme, every module of the
    listed packages (through package-dir), the package data, the console scripts' modules, and
    runs scripts/install: each must be COPYed to the same place under WORKDIR (and not left out by
    .dockerignore). Main's Dockerfile never copied calibration_client/, so the build failed."""
    copied = smoke.build_files()
    needed = smoke.build_needs()
    assert {"pyproject.toml", "README.md", "scripts/install", "app/cli.py", "calibration_client/cli.py",
            "migrations/script.py.mako", "calibration/methods/__init__.py"} <= needed
    missing = sorted(needed - set(copied))
    assert not missing, f"the Dockerfile's build stage does not copy {missing}"
    assert all(copied[path] == REPO / path for path in needed)  # each from its own path in the repository


def test_the_install_set_check_reads_copy_lines_as_docker_does(tmp_path):
    """The reader of COPY lines on a Dockerfile of known layout: a folder copied into a folder keeps
    its contents' paths, several sources land in a folder by their names, --from lines are not the
    context, and .dockerignore patterns (``**/`` any depth) leave files out."""
    for name in ("pkg/a.py", "pkg/__pycache__/a.pyc", "pkg/sub/b.py", "top.txt", "other.txt", "x.db"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / ".dockerignore").write_text("**/__pycache__\n*.db*\n")
    (tmp_path / "Dockerfile").write_text(
        "FROM base AS build\nWORKDIR /src\nCOPY top.txt other.txt x.db ./\nCOPY pkg ./lib\n"
        "COPY --from=other /x /y\nRUN true\nFROM base\nCOPY --from=build /src /src\n")
    assert smoke.build_files(tmp_path) == {"top.txt": tmp_path / "top.txt", "other.txt": tmp_path / "other.txt",
                                           "lib/a.py": tmp_path / "pkg/a.py", "lib/sub/b.py": tmp_path / "pkg/sub/b.py"}


def test_the_smoke_run_reads_the_compose_file_as_yaml_does():
    """scripts/deployment_smoke.py runs with the standard library only until its venv exists, so it
    reads docker-compose.yml itself: the same commands and environments as PyYAML's reading."""
    compose = _compose()
    read = smoke.compose_services()
    assert set(read) == set(compose["services"])
    for name, service in compose["services"].items():
        assert read[name]["command"] == service.get("command"), name
        assert read[name]["environment"] == {k: str(v) for k, v in (service.get("environment") or {}).items()}, name


def test_ci_runs_the_deployment_smoke_after_the_tests():
    ci = _read(".ci/run")
    commands = [line for line in ci.splitlines() if line and not line.startswith(("#", " "))]
    assert commands[-2:] == ["make test", "python3 scripts/deployment_smoke.py"]


def test_docker_compose_config_accepts_the_file():
    if shutil.which("docker-compose") is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("docker-compose is required in CI (.ci/run installs it)")
        pytest.skip("docker-compose is not installed")
    result = subprocess.run(["docker-compose", "config", "-q"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_cli_help_names_the_commands():
    result = subprocess.run([sys.executable, "-m", "app.cli", "--help"], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0
    assert "serve" in result.stdout and "migrate" in result.stdout


def test_make_test_builds_the_docs_site_strictly():
    """`make test` (what CI runs) builds the MkDocs site with --strict, with the docs extra installed."""
    makefile, pyproject = _read("Makefile"), _read("pyproject.toml")
    assert re.search(r"^\t.*\$\(VENV\)/bin/mkdocs build --strict", makefile, re.M)
    assert re.search(r"^TEST_EXTRAS = .*\bdocs\b", makefile, re.M)
    assert re.search(r'^docs = \[.*"mkdocs>=[^"]*".*"mkdocs-material>=[^"]*".*"mkdocstrings\[python\]', pyproject, re.M)
    assert (REPO / "mkdocs.yml").exists()


@pytest.mark.parametrize(("docs_status", "tests_status"), [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_make_check_builds_the_docs_beside_the_suite_and_fails_if_either_fails(tmp_path, docs_status, tests_status):
    """`make test`'s steps after the install (`make check`), run on a venv of stand-ins for ruff, mkdocs and
    python: the suite starts while the docs build still runs (it waits for the build's start and the build
    waits for the suite's), and the target's exit status is non-zero when the build or the suite failed."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)

    def stand_in(name: str, body: str) -> None:
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)

    # each waits (at most 20 s) for the other's file: neither ends unless both run at once
    wait_for = ('i=0; while [ ! -e {0} ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done; '
                '[ -e {0} ] || {{ touch "$STAND_INS/alone"; exit 1; }}')
    stand_in("ruff", 'echo "$@" > "$STAND_INS/ruff"')
    stand_in("mkdocs", f'echo "$@" > "$STAND_INS/mkdocs"; {wait_for.format("$STAND_INS/python")}; exit {docs_status}')
    stand_in("python", f'echo "$@" > "$STAND_INS/python"; {wait_for.format("$STAND_INS/mkdocs")}; exit {tests_status}')
    done = subprocess.run(["make", "--no-print-directory", "-C", str(REPO), "check", f"VENV={tmp_path / 'venv'}"],
                          env={**os.environ, "STAND_INS": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert (tmp_path / "ruff").read_text().split() == ["check", "."]
    assert (tmp_path / "mkdocs").read_text().split() == ["build", "--strict", "--quiet"]
    assert (tmp_path / "python").read_text().split() == ["-m", "pytest"]
    assert not (tmp_path / "alone").exists(), "the docs build and the suite did not run at the same time"
    assert (done.returncode == 0) == (docs_status == 0 and tests_status == 0), (done.returncode, done.stderr)


def test_every_package_of_the_source_is_in_the_distribution():
    """A package missing from ``[tool.setuptools] packages`` imports in the editable install the tests
    use and is absent from the image's (non-editable) install: the deployment smoke run's worker
    failed with ``No module named 'calibration.conformal'``."""
    import tomllib

    listed = set(tomllib.loads(_read("pyproject.toml"))["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(REPO).parts)
             for root in ("app", "calibration", "calibration_client") for init in (REPO / root).rglob("__init__.py")
             if "__pycache__" not in init.parts}
    assert found - listed == set()
    assert {"app.migrations", "app.migrations.versions"} <= listed


def test_compose_sends_alarms_to_the_webhook_from_the_worker_too():
    """The scheduled ``alarms`` jobs run on the worker: docker-compose passes the host's
    ``CALIBRATION_ALARM_WEBHOOK_URL`` to ``api`` and ``worker`` alike, and unset it arrives as an empty
    string, which the settings read as no webhook (not as a URL that fails its pattern)."""
    compose = _compose()
    for name in ("api", "worker"):
        assert compose["services"][name]["environment"]["CALIBRATION_ALARM_WEBHOOK_URL"] == \
            "${CALIBRATION_ALARM_WEBHOOK_URL:-}", name
    assert Settings(alarm_webhook_url="").alarm_webhook_url is None
    assert Settings(alarm_webhook_url="https://hooks.example/x").alarm_webhook_url == "https://hooks.example/x"
    assert smoke.interpolate("${CALIBRATION_ALARM_WEBHOOK_URL:-}", {}) == ""
    assert smoke.interpolate("${X:-d}/${Y}", {"Y": "y"}) == "d/y"
