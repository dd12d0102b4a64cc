"""The service and the numeric core type-check: mypy, as pyproject.toml's ``[tool.mypy]`` configures
it (``app`` and ``calibration``, pydantic's plugin), reports no error."""

from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_reports_no_error(monkeypatch):
    monkeypatch.chdir(ROOT)  # the configuration and the files it names are the project root's
    stdout, stderr, status = api.run([])
    assert status == 0, f"mypy exited with {status}:\n{stdout}{stderr}"
