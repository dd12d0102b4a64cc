"""Property-based fuzzing of the whole OpenAPI schema with schemathesis, against a live server.

Checks: no 5xx, and every response conforms to the schema (status code, content type, headers,
body). Operations that delete run in a second pass, so the first one reaches calibrators that
exist. ``tests/service/fuzz/test_fuzz.py`` runs a bounded pass; ``scripts/fuzz`` a longer one.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from app.registry.schemas import EXAMPLE_LABELS, EXAMPLE_LOGITS

CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_headers_conformance,response_schema_conformance")


def seed_calibrator(base: str, headers: dict | None = None) -> None:
    """The calibrator `demo` (the schema's example name) with an alias, so fuzzing reaches past 404."""
    fit = {"method": "temperature", "logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS}
    assert httpx.post(f"{base}/v1/calibrators/demo/versions", json=fit, headers=headers).status_code == 201
    httpx.put(f"{base}/v1/calibrators/demo/aliases/production", json={"version": 1}, headers=headers)


def fuzz(base: str, max_examples: int, seed: int, headers: dict | None = None,
         phases: str | None = None, mode: str | None = None, unicode_tables: Path | None = None) -> tuple[int, str]:
    """Run schemathesis twice (everything but DELETE, then DELETE); the exit code and its output.
    ``phases`` (e.g. ``"examples,coverage"``) limits the phases run; all four by default. ``mode``
    (``"positive"``: valid requests only, ``"negative"``) limits the cases generated; both by default.

    Each run starts in an empty directory (Hypothesis's storage, its example database included, is
    ``.hypothesis`` there), except for Hypothesis's Unicode tables (the characters of each category
    and those UTF-8 encodes, a walk over all 1.1 million code points): ``.hypothesis/unicode_data``
    is ``unicode_tables`` (a temporary folder for this call's two runs by default), which the first
    run writes and the next ones read."""
    executable = Path(sys.executable).with_name("schemathesis")
    extra = [arg for name, value in (headers or {}).items() for arg in ("-H", f"{name}: {value}")]
    extra += ["--phases", phases] if phases else []
    extra += ["--mode", mode] if mode else []
    output, code = [], 0
    with tempfile.TemporaryDirectory() as scratch:
        tables = unicode_tables or Path(scratch) / "unicode_data"
        tables.mkdir(parents=True, exist_ok=True)
        for selection in (["--exclude-method", "DELETE"], ["--include-method", "DELETE"]):
            with tempfile.TemporaryDirectory() as cwd:  # schemathesis writes a cache where it runs
                (Path(cwd) / ".hypothesis").mkdir()
                (Path(cwd) / ".hypothesis" / "unicode_data").symlink_to(tables, target_is_directory=True)
                done = subprocess.run([str(executable), "run", f"{base}/openapi.json", "--checks", CHECKS,
                                       "--max-examples", str(max_examples), "--seed", str(seed), "--workers", "1",
                                       *selection, *extra], capture_output=True, text=True, timeout=1800, cwd=cwd)
            output.append(done.stdout + done.stderr)
            code = code or done.returncode
    return code, "\n".join(output)
