"""``calibration fit | calibrate``: fit a calibrator version from a labelled file (a job with a
progress bar when it is large), and serve calibrated probabilities from it, written with their
prediction ids."""

import csv
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from ..errors import NotFound
from .base import (
    LONG_FIT_ENTRIES,
    ArrayFile,
    InputOption,
    JsonFlag,
    LabelledFile,
    _arrays,
    _bar,
    _before_after,
    _json_option,
    _labelled,
    _parameters,
    _print_json,
    _show,
    _spinner,
    _values,
    app,
    err,
    examples,
    handled,
    out,
)

if TYPE_CHECKING:  # numpy and the client (httpx) are imported by the commands that use them
    import numpy as np

    from ..client import Client


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


def _resolve(client: "Client", ref: str, version: int | None) -> tuple[str, int]:
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


def _given_ids(arrays: dict[str, "np.ndarray"], file: Path, ids_file: Path | None, column: str | None,
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


def _write_calibrated(path: Path, probabilities: "np.ndarray", ids: list[str] | None,
                      class_names: list[str] | None) -> str:
    """``--out``: ``.npz`` (probabilities, and ids), ``.csv`` (an id column, then one column a
    class) or ``.npy`` (the probabilities only). Returns what was written."""
    import numpy as np

    from ..codec import save_npy

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
    import numpy as np

    arrays = _arrays(file)
    kind, values = _values(arrays, file, input)
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
