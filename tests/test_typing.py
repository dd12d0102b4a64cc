"""The service and the numeric core type-check: mypy, as pyproject.toml's ``[tool.mypy]`` configures
it (``app`` and ``calibration``, pydantic's plugin), reports no error.

mypy runs in a process of its own: run in the test process (``mypy.api``), it leaves that process
holding its whole program's objects, with the cyclic collector's permanent generation emptied
(``gc.unfreeze``), and every later test in the process then pays for them (0.04 -> 0.7 s a test)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_reports_no_error():
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"mypy exited with {done.returncode}:\n{done.stdout}{done.stderr}"
