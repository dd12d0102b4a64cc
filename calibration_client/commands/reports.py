"""``calibration report | metrics | compare``: a version's before/after report on held-out data,
the calibration metrics of raw outputs with their bootstrap intervals, and a cross-validated
comparison of methods."""

from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from .base import (
    InputOption,
    JsonFlag,
    LabelledFile,
    _bar,
    _before_after,
    _fmt,
    _labelled,
    _print_json,
    _show,
    app,
    err,
    handled,
    out,
)


@app.command()
@handled
def report(
    context: typer.Context,
    ref: Annotated[str, typer.Argument(metavar="REF", help="NAME (latest version) or NAME@ALIAS.",
                                                 show_default=False)],
    file: Annotated[Path, LabelledFile],
    version: Annotated[int | None, typer.Option(help="Pin a version.", min=1, show_default=False)] = None,
    png: Annotated[Path | None, typer.Option(help="Also write the reliability diagram to this PNG.",
                                             dir_okay=False, show_default=False)] = None,
    bins: Annotated[int, typer.Option(help="Bins of the binned metrics.", min=1, max=1000)] = 15,
    bootstrap: Annotated[int, typer.Option(help="Bootstrap resamples for intervals.", min=0, max=2000)] = 0,
    input: InputOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Metrics before and after calibration on a labelled FILE.npz (and a PNG diagram with --png)."""
    kind, values, labels = _labelled(file, input)
    with context.obj.client() as client:
        answer = client.report(ref, values, labels, version=version, input=kind, n_bins=bins, bootstrap=bootstrap)
        if png is not None:
            png.write_bytes(client.report(ref, values, labels, version=version, input=kind, n_bins=bins,
                                          image="png"))
    if as_json:
        _print_json(answer)
    else:
        _show(f"{answer['name']} version {answer['version']} on {answer['n_samples']} samples",
              _before_after(answer))
    if png is not None:
        err.print(f"wrote the reliability diagram to {png}")


@app.command()
@handled
def metrics(
    context: typer.Context,
    file: Annotated[Path, LabelledFile],
    bins: Annotated[int, typer.Option(help="Bins of the binned metrics.", min=1, max=1000)] = 15,
    input: InputOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Metrics of a labelled FILE.npz as it is (no calibrator)."""
    kind, values, labels = _labelled(file, input)
    with context.obj.client() as client:
        answer = client.metrics(values, labels, input=kind, n_bins=bins)
    if as_json:
        _print_json(answer)
        return
    table = Table()
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in answer["metrics"].items():
        table.add_row(name, _fmt(value))
    _show(f"{answer['n_samples']} samples × {answer['n_classes']} classes", table)


COMPARE_COLUMNS = {"nll": "nll", "brier": "brier", "ece": "ece", "kde_ece": "kde-ece",
                   "accuracy_change": "Δacc"}


def show_comparison(result: dict) -> None:
    """The candidates' cross-validated means (NLL also with its sd across folds), the chosen one
    starred, then why the others were not chosen."""
    selection = result.get("selection") or {}
    chosen = (selection.get("chosen") or {}).get("name")
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1))
    table.add_column("candidate", overflow="fold")
    for key, header in COMPARE_COLUMNS.items():
        table.add_column(header, justify="right", min_width=6)
        if key == "nll":
            table.add_column("± sd", justify="right", min_width=6)

    def cells(mean: dict, sd: dict | None) -> list[str]:
        row = []
        for key in COMPARE_COLUMNS:
            row.append(_fmt(mean.get(key)))
            if key == "nll":
                row.append(_fmt((sd or {}).get(key)) if sd is not None else "")
        return row

    table.add_row("uncalibrated", *cells(result.get("uncalibrated") or {}, None), style="dim")
    for method in result["methods"]:
        mark = "★ " if method["name"] == chosen else "  "
        table.add_row(mark + method["name"], *cells(method.get("mean") or {}, method.get("std") or {}),
                      style="bold green" if method["name"] == chosen else None)
    _show(f"{result['folds']}-fold comparison on {result['n_samples']} samples × {result['n_classes']} classes "
          "(means over the held-out folds)", table)
    reason = selection.get("reason")
    out.print(f"selection: {reason}" if reason else "selection: no candidate passes the rule", soft_wrap=True)
    for method in result["methods"]:
        why = method.get("error") or (selection.get("excluded") or {}).get(method["name"])
        if why:
            out.print(f"  [dim]excluded {method['name']}: {why}[/dim]", soft_wrap=True)


@app.command()
@handled
def compare(
    context: typer.Context,
    file: Annotated[Path, LabelledFile],
    methods: Annotated[str | None, typer.Option(help="Comma-separated candidates (default: the service's set "
                                                     "for the data's size).", show_default=False)] = None,
    folds: Annotated[int, typer.Option(help="Stratified cross-validation folds.", min=2, max=20)] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the fold assignment.", min=0)] = 0,
    preserve_accuracy: Annotated[bool, typer.Option(help="Choose among accuracy-preserving methods only.")] = False,
    input: InputOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Compare methods by cross-validation on a labelled FILE.npz (a job; its progress is shown)."""
    kind, values, labels = _labelled(file, input)
    candidates = [m.strip() for m in methods.split(",") if m.strip()] if methods else None
    with context.obj.client() as client, _bar() as progress:
        task = progress.add_task(f"comparing on {len(labels)} samples, {folds} folds", total=100)
        result = client.compare(values, labels, input=kind, methods=candidates, folds=folds, seed=seed,
                                preserve_accuracy=preserve_accuracy,
                                progress=lambda percent: progress.update(task, completed=percent), poll=0.25)
    if as_json:
        _print_json(result)
        return
    show_comparison(result)
