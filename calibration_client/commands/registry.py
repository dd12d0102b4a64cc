"""``calibration versions | calibrators | alias | jobs | methods``: what the service holds and where
its aliases point, its jobs, and the methods it offers."""

from typing import Annotated

import typer
from rich.table import Table

from ..errors import CalibrationError
from .base import (
    PROBLEM,
    JsonFlag,
    _bar,
    _fmt,
    _print_json,
    _show,
    app,
    err,
    handled,
    out,
)
from .reports import show_comparison


@app.command()
@handled
def versions(
    context: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="Calibrator name.", show_default=False)],
    as_json: JsonFlag = False,
) -> None:
    """The versions of a calibrator, newest first."""
    with context.obj.client() as client:
        found = client.versions(name)
    if as_json:
        _print_json([v.raw for v in found])
        return
    table = Table()
    for column in ("version", "method", "input", "samples", "classes", "converged", "aliases", "created"):
        table.add_column(column, justify="right" if column in ("version", "samples", "classes") else "left")
    for v in found:
        table.add_row(str(v.version), v.method, v.input, _fmt(v.n_samples), _fmt(v.n_classes),
                      _fmt((v.diagnostics or {}).get("converged")), ", ".join(v.aliases), (v.created_at or "")[:19])
    _show(name, table)


@app.command()
@handled
def calibrators(context: typer.Context, as_json: JsonFlag = False) -> None:
    """Every calibrator: latest version, number of versions, aliases."""
    with context.obj.client() as client:
        found = client.calibrators()
    if as_json:
        _print_json([c.raw for c in found])
        return
    table = Table()
    for column in ("name", "latest", "versions", "aliases", "created"):
        table.add_column(column, justify="right" if column in ("latest", "versions") else "left")
    for c in found:
        aliases = ", ".join(f"{alias}→{number}" for alias, number in sorted(c.aliases.items()))
        table.add_row(c.name, _fmt(c.latest_version), str(c.n_versions), aliases, (c.created_at or "")[:19])
    out.print(table)


@app.command()
@handled
def alias(
    context: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="Calibrator name.", show_default=False)],
    alias: Annotated[str, typer.Argument(metavar="ALIAS", help="Alias, e.g. production.", show_default=False)],
    version: Annotated[int, typer.Argument(metavar="VERSION", help="The version it points at.", min=1,
                                                show_default=False)],
) -> None:
    """Point ALIAS at VERSION; callers then serve NAME@ALIAS."""
    with context.obj.client() as client:
        answer = client.set_alias(name, alias, version)
    out.print(f"{answer['name']}@{answer['alias']} → version {answer['version']}")


@app.command()
@handled
def jobs(
    context: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="ID", help="Job id (from Location: /v1/jobs/ID).",
                                          show_default=False)],
    wait: Annotated[bool, typer.Option(help="Follow the job until it ends.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """A background job: status and percent done (--wait follows it with a progress bar)."""
    with context.obj.client() as client:
        if wait:
            with _bar() as progress:
                task = progress.add_task(f"job {job_id}", total=100)
                try:
                    client.wait_for_job(job_id, lambda p: progress.update(task, completed=p), poll=0.25)
                except CalibrationError as exc:
                    if getattr(exc, "job", None) is None:
                        raise
        job = client.job(job_id)
    if as_json:
        _print_json(job.raw)
    else:
        out.print(f"job {job.id} ({job.kind}): {job.status}, {job.percent:.0f}% done; updated {job.updated_at}")
        if job.status == "succeeded" and isinstance(job.result, dict) and "methods" in job.result:
            show_comparison(job.result)
    if job.error:
        err.print(f"[bold red]failed[/bold red]: {job.error.get('title', '')}: {job.error.get('detail', '')}",
                  soft_wrap=True)
        raise typer.Exit(PROBLEM)


@app.command("methods")
@handled
def list_methods(context: typer.Context, as_json: JsonFlag = False) -> None:
    """The calibration methods the service offers."""
    with context.obj.client() as client:
        found = client.methods()
    if as_json:
        _print_json(found)
        return
    table = Table()
    table.add_column("method")
    table.add_column("keeps argmax")
    table.add_column("description")
    for method in found:
        table.add_row(method["name"], "yes" if method.get("accuracy_preserving") else "no",
                      method.get("description", ""))
    out.print(table)
