"""typer's ``CliRunner`` with the command line's click command built once per test process.

``typer.testing.CliRunner.invoke`` builds the click command from the typer app on every call: for
``calibration``'s ~40 commands that is every command's signature and type hints inspected again,
~40 ms of CPU a call, more than most commands spend on their own. The command built is the same
each time (the app is not changed after import), and click makes a fresh context for every run,
so the runner here builds it on the first call and hands the same one to every later call; the
invocation (its isolated streams, environment, exit code and output) is typer's own."""

from __future__ import annotations

import contextlib
import functools

import typer.testing
from typer import Typer


@functools.cache
def _command(app: Typer):
    return typer.main.get_command(app)


class CliRunner(typer.testing.CliRunner):
    def invoke(self, app: Typer, *args, **kwargs):  # type: ignore[override]
        with _built_once():
            return super().invoke(app, *args, **kwargs)


@contextlib.contextmanager
def _built_once():
    build = typer.testing._get_command
    typer.testing._get_command = _command  # type: ignore[assignment]
    try:
        yield
    finally:
        typer.testing._get_command = build
