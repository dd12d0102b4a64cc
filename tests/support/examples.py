"""The runner of the docs' examples (``tests/test_examples_sqlite.py`` and
``tests/test_examples_postgres.py``, one file a database so that two test workers share the run):
each ```bash, ```sh and ```python block of README.md and docs/*.md is executed, in order, file by
file, against a live server (SQLite, and Postgres with a job worker beside it; the scheduler off, so
that each step the text shows happens when it says), from a directory holding the repository's
``examples/`` and ``.venv``, with ``calibration`` on the PATH resolving to the venv's command and
``$CALIBRATION_URL`` set to the server.

- Addresses: ``http://127.0.0.1:8000`` and ``localhost:8000`` in a block (the address ``make
  serve`` listens on, as a reader types it) are replaced by the live server's.
- Shell blocks run with ``bash -e -o pipefail``, one process a block; Python blocks share one
  namespace per file, so a later block uses an earlier one's names.
- A line ``#> TEXT`` in a block is output the block prints: its whitespace-normalised output must
  contain TEXT (normalised the same way). A block that exits non-zero or raises fails the test.
- A block preceded by ``<!-- not-run: REASON -->`` is not run (a production address, a GPU, a
  placeholder id): the runner counts these and each needs a reason."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.service.support.databases import create_postgres_database
from tests.service.support.live import live_server

FILES = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?:<!-- not-run: (?P<reason>[^>]*?) -->\n)?^```(?P<lang>bash|sh|python)\n(?P<code>.*?)^```$",
                   re.S | re.M)
FENCE = re.compile(r"^\s*```(bash|sh|python)\s*$", re.M)
EXPECT = re.compile(r"^\s*#> (.*)$", re.M)
ADDRESS = re.compile(r"http://127\.0\.0\.1:8000|(?<![\w/])localhost:8000|http://localhost:8000")


def blocks(name: str) -> list[dict]:
    """The runnable-language blocks of a file, in order: language, code, the not-run reason (or None)."""
    text = (REPO / name).read_text()
    found = [{"lang": m["lang"], "code": m["code"], "reason": m["reason"], "line": text.count("\n", 0, m.start()) + 1}
             for m in BLOCK.finditer(text)]
    assert len(found) == len(FENCE.findall(text)), f"{name}: a ``` block the runner cannot read (indented?)"
    return found


def files_with_examples() -> list[str]:
    """The files of ``FILES`` with at least one block to run (each a test, on each database)."""
    return [name for name in FILES if any(not b["reason"] for b in blocks(name))]


def normalised(text: str) -> str:
    return " ".join(text.split())


@contextlib.contextmanager
def examples_server(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A live server for the examples on ``database`` (``sqlite`` or ``postgres``): its base URL."""
    if database == "sqlite":
        url, drop = f"sqlite:///{tmp_path_factory.mktemp('examples') / 'calibration.db'}", None
    else:
        url, drop = create_postgres_database()
    try:
        # on Postgres jobs (a comparison, an `auto` fit) go to the queue: a worker runs beside, as compose starts one
        with live_server(url, env={"CALIBRATION_SCHEDULE_SECONDS": "0"}, worker=database == "postgres",
                         log_file=tmp_path_factory.mktemp("log") / "server.log") as base:
            yield base
    finally:
        if drop:
            drop()


#: a block's limit: a hung command fails its test, a slow one does not (client-cli.md's one block runs ~40
#: commands, ~20 CPU-s; a loaded 2-core machine took over 120 s); under the suite's 300 s a test
BLOCK_SECONDS = 240


def _run_shell(code: str, cwd: Path, env: dict) -> str:
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=BLOCK_SECONDS)
    assert done.returncode == 0, f"exit {done.returncode}\n{code}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    return done.stdout


def _run_python(code: str, cwd: Path, namespace: dict) -> str:
    printed = io.StringIO()
    here = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(code, "<example>", "exec"), namespace)  # the docs' own examples
    finally:
        os.chdir(here)
    return printed.getvalue()


def run_examples(name: str, server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run every block of ``name`` not marked not-run against ``server``, checking each ``#>`` line."""
    found = blocks(name)
    runnable = [b for b in found if not b["reason"]]
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    (tmp_path / "examples").symlink_to(REPO / "examples")
    host = server.removeprefix("http://")
    env = {**os.environ, "CALIBRATION_URL": server, "COLUMNS": "200", "TERM": "dumb", "NO_COLOR": "1",
           "PATH": f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("CALIBRATION_API_KEY", None)
    for key, value in (("CALIBRATION_URL", server), ("COLUMNS", "200"), ("NO_COLOR", "1")):
        monkeypatch.setenv(key, value)
    namespace: dict = {"__name__": "__example__"}
    started = time.monotonic()
    for block in runnable:
        code = ADDRESS.sub(lambda m: server if m.group(0).startswith("http") else host, block["code"])
        where = f"{name}:{block['line']}"
        if block["lang"] == "python":
            try:
                said = _run_python(code, tmp_path, namespace)
            except Exception as error:
                raise AssertionError(f"{where}: {type(error).__name__}: {error}\n{code}") from error
        else:
            said = _run_shell(code, tmp_path, env)
        for expected in EXPECT.findall(block["code"]):
            assert normalised(expected) in normalised(said), f"{where}: expected {expected!r} in:\n{said}"
    print(f"{name}: {len(runnable)} blocks run, {len(found) - len(runnable)} not run, "
          f"{time.monotonic() - started:.1f} s")
