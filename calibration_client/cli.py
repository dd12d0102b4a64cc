"""``calibration``: the calibration service from a terminal (typer + rich).

Progress, tables and errors are for people; ``--json`` prints the service's answer for
scripts, and the exit status says what went wrong (see ``EXIT_CODES`` in ``cli_base``). The
offline and version commands live here, the online loop's in ``cli_online`` and ``cli_loop``,
what they share in ``cli_base``.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich import box
from rich.table import Table

from .cli_base import (
    LONG_FIT_ENTRIES,
    PROBLEM,
    ArrayFile,
    InputOption,
    JsonFlag,
    LabelledFile,
    _arrays,
    _bar,
    _before_after,
    _fmt,
    _input_of,
    _json_option,
    _labelled,
    _parameters,
    _print_json,
    _show,
    _spinner,
    app,
    err,
    examples,
    handled,
    out,
)
from .client import Client
from .codec import save_npy
from .errors import CalibrationError, NotFound


@app.command()
@handled
def fit(
    context: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="Calibrator name (created on the first fit).",
                                                  show_default=False)],
    file: Annotated[Path, LabelledFile],
    method: Annotated[str, typer.Option(help="A method of `calibration methods`, or auto.")] = "temperature",
    options: Annotated[str | None, typer.Option(help='Method options as JSON, e.g. \'{"folds": 3}\'.',
                                                show_default=False)] = None,
    class_names: Annotated[str | None, typer.Option(help="Comma-separated class names, in label order.",
                                                    show_default=False)] = None,
    description: Annotated[str | None, typer.Option(show_default=False)] = None,
    tag: Annotated[list[str] | None, typer.Option(help="KEY=VALUE (repeatable).", show_default=False)] = None,
    input: InputOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Fit a method on FILE.npz (logits/probabilities/scores and labels) and store the next version."""
    kind, values, labels = _labelled(file, input)
    tags = {}
    for item in tag or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--tag takes KEY=VALUE, not {item!r}")
        tags[key] = value
    names = [n.strip() for n in class_names.split(",")] if class_names else None
    # auto and large fits run as jobs with a progress bar of the job's own percent; small ones in the request
    as_job = method == "auto" or values.size >= LONG_FIT_ENTRIES
    with context.obj.client() as client, (_bar() if as_job else _spinner("")) as progress:
        task = progress.add_task(f"fitting {method} on {len(labels)} samples", total=100 if as_job else None)
        version = client.fit(name, labels=labels, **{kind: values}, method=method,
                             options=_json_option(options, "--options"), class_names=names,
                             description=description, tags=tags or None, poll=0.25,
                             progress=(lambda percent: progress.update(task, completed=percent)) if as_job else None)
    if as_json:
        _print_json(version.raw)
        return
    converged = (version.diagnostics or {}).get("converged")
    chosen = version.parameters.get("chosen") if version.method == "auto" else None
    out.print(f"[bold]{version.name}[/bold] version [bold]{version.version}[/bold]: {version.method} "
              f"{'(chose ' + chosen + ') ' if chosen else ''}"
              f"on {version.n_samples} × {version.n_classes} {version.input}"
              + ("" if converged is None else f"; converged: {converged}"))
    out.print(f"parameters: {_parameters(version.parameters)}", soft_wrap=True)
    if version.report and "before" in version.report:
        _show("on the fitting data", _before_after(version.report))
    comparison = (version.report or {}).get("comparison")
    if comparison and comparison.get("selection"):
        out.print(f"auto: {comparison['selection'].get('reason', '')}", soft_wrap=True)


def _resolve(client: Client, ref: str, version: int | None) -> tuple[str, int]:
    """The version ``ref`` serves now, so that a binary call can be pinned to it (and say which)."""
    name, _, alias = ref.partition("@")
    if version is not None:
        if alias:
            raise typer.BadParameter("give NAME with --version, not NAME@ALIAS")
        return name, version
    calibrator = client.calibrator(name)
    if alias:
        if alias not in calibrator.aliases:
            raise NotFound(f"calibrator {name!r} has no alias {alias!r}", status=404, title="Not Found")
        return name, calibrator.aliases[alias]
    if calibrator.latest_version is None:
        raise NotFound(f"calibrator {name!r} has no versions", status=404, title="Not Found")
    return name, calibrator.latest_version


def _ids_from_file(path: Path, column: str | None) -> list[str]:
    """Prediction ids from ``--ids FILE``: an ``.npy`` array, an ``.npz`` member (``column``,
    default ``ids``), a CSV with a header row naming ``column``, or (no ``column``) one id a line."""
    if path.suffix in (".npy", ".npz"):
        arrays = _arrays(path)
        member = "" if "" in arrays else (column or "ids")
        if member not in arrays:
            raise typer.BadParameter(f"{path} has no {member!r} array (it has {', '.join(arrays)}); "
                                     "name it with --id-column")
        return [str(i) for i in arrays[member].reshape(-1).tolist()]
    with path.open(newline="") as handle:
        if column is None:
            return [line.strip() for line in handle if line.strip()]
        reader = csv.DictReader(handle)
        if column not in (reader.fieldnames or []):
            raise typer.BadParameter(f"{path} has no column {column!r} (its header: "
                                     f"{', '.join(reader.fieldnames or [])})")
        return [row[column] for row in reader]


def _given_ids(arrays: dict[str, np.ndarray], file: Path, ids_file: Path | None, column: str | None,
               n: int) -> list[str] | None:
    """The ids ``calibrate`` sends: from ``--ids FILE``, or the input .npz's ``--id-column`` member."""
    if ids_file is not None:
        ids = _ids_from_file(ids_file, column)
    elif column is not None:
        if column not in arrays:
            raise typer.BadParameter(f"{file} has no {column!r} array for --id-column (it has {', '.join(arrays)})")
        ids = [str(i) for i in arrays[column].reshape(-1).tolist()]
    else:
        return None
    if len(ids) != n:
        raise typer.BadParameter(f"{len(ids)} ids for {n} rows")
    return ids


def _write_calibrated(path: Path, probabilities: np.ndarray, ids: list[str] | None,
                      class_names: list[str] | None) -> str:
    """``--out``: ``.npz`` (probabilities, and ids), ``.csv`` (an id column, then one column a
    class) or ``.npy`` (the probabilities only). Returns what was written."""
    if path.suffix == ".npz":
        arrays = {"probabilities": np.asarray(probabilities)} | ({"ids": np.asarray(ids)} if ids is not None else {})
        np.savez(path, **arrays)
        return "probabilities and ids" if ids is not None else "probabilities"
    if path.suffix == ".csv":
        names = class_names or [str(k) for k in range(probabilities.shape[1])]
        with path.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow((["id"] if ids is not None else []) + [f"p_{name}" for name in names])
            for row, values in enumerate(np.asarray(probabilities)):  # numpy's shortest repr in its dtype
                writer.writerow(([ids[row]] if ids is not None else []) + [str(v) for v in values])
        return "ids and probabilities" if ids is not None else "probabilities"
    save_npy(path, probabilities)
    if ids is not None:
        err.print("[yellow]note[/yellow]: an .npy file holds the probabilities only; --out FILE.npz or FILE.csv "
                  "also writes the prediction ids", soft_wrap=True)
    return "probabilities"




CALIBRATE_EXAMPLES = examples(
    "$ calibration calibrate resnet@production batch.npy --ids ids.txt --out served.csv",
    "  (ids.txt: one id a line; served.csv: an id column, then one column a class)",
    "$ calibration calibrate resnet batch.npz --id-column request_id --out served.npz",
    "  (the ids are the .npz's request_id array; served.npz holds probabilities and ids)",
    "With the calibrator's logging on (`calibration logging NAME RATE`) and no ids, the ids the service "
    "generated are written; post labels by id with `calibration label NAME FILE`.",
)


@app.command(epilog=CALIBRATE_EXAMPLES)
@handled
def calibrate(
    context: typer.Context,
    ref: Annotated[str, typer.Argument(metavar="REF", help="NAME (latest version) or NAME@ALIAS.",
                                                 show_default=False)],
    file: Annotated[Path, ArrayFile],
    version: Annotated[int | None, typer.Option(help="Pin a version.", min=1, show_default=False)] = None,
    out_file: Annotated[Path | None, typer.Option(
        "--out", help="Write every row: FILE.npy (probabilities), FILE.npz (probabilities and ids) or FILE.csv "
                      "(id, then one column a class).", dir_okay=False, show_default=False)] = None,
    ids_file: Annotated[Path | None, typer.Option(
        "--ids", help="Prediction ids, one a row: a text file (one id a line), a CSV (with --id-column), "
                      "or an .npy/.npz array.", exists=True, dir_okay=False, readable=True,
        show_default=False)] = None,
    id_column: Annotated[str | None, typer.Option(
        help="The column of the --ids CSV (or member of its .npz), or without --ids the member of FILE.npz "
             "that holds the ids.", show_default=False)] = None,
    input: InputOption = None,
    rows: Annotated[int, typer.Option(help="Rows to show when not writing --out.", min=0)] = 10,
) -> None:
    """Calibrated probabilities of FILE.npy (one array) or FILE.npz (its logits/probabilities/scores),
    with the prediction ids the service used when the calibrator logs (yours with --ids or
    --id-column, else generated)."""
    arrays = _arrays(file)
    if "" in arrays:
        kind, values = input or "logits", arrays[""]
    else:
        kind = _input_of(arrays, file, input)
        values = arrays[kind]
    given = _given_ids(arrays, file, ids_file, id_column, len(values))
    with context.obj.client() as client:
        name, number = _resolve(client, ref, version)
        probabilities = client.calibrate(name, values, version=number, input=kind, ids=given)
        ids = probabilities.ids if probabilities.ids is not None else given
        served = f"{name} version {number}"
        logged = "" if probabilities.logged is None else f"; {probabilities.logged} rows logged"
        needs_names = out_file is None or out_file.suffix == ".csv"
        class_names = client.version(name, number).class_names if needs_names else None
    if out_file is not None:
        what = _write_calibrated(out_file, probabilities, ids, class_names)
        out.print(f"wrote {probabilities.shape[0]} × {probabilities.shape[1]} {what} from {served} "
                  f"to {out_file}{logged}")
        return
    table = Table()
    for column in ("row", *(("id",) if ids is not None else ()), "class", "confidence"):
        table.add_column(column, justify="left" if column in ("id", "class") else "right")
    predicted = np.asarray(probabilities).argmax(axis=1)
    for row in range(min(rows, len(predicted))):
        label = class_names[predicted[row]] if class_names else str(predicted[row])
        table.add_row(str(row), *((ids[row],) if ids is not None else ()), label,
                      f"{probabilities[row, predicted[row]]:.4f}")
    _show(f"{served}: {probabilities.shape[0]} rows × {probabilities.shape[1]} classes"
          f"{' (first ' + str(rows) + ')' if probabilities.shape[0] > rows else ''}{logged}", table)
    out.print("[dim]--out FILE.npz or FILE.csv writes every row[/dim]")


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


def _show_comparison(result: dict) -> None:
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
    _show_comparison(result)


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
            _show_comparison(job.result)
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


# register observe, logging, label, observations, refit, quality (cli_online), alarms, label-shift,
# evaluate, evaluations, promote, gate, rollback, history, policy (cli_loop) and set-predictor,
# set-predictors, sets (cli_sets)
from . import cli_loop, cli_online, cli_sets  # noqa: E402, F401


def main() -> None:
    app()


if __name__ == "__main__":
    main()
