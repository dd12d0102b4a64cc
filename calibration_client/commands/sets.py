"""``calibration set-predictor | set-predictors | sets``: conformal prediction sets from a terminal
(fit a set predictor of a version on held-out rows, list or delete them, and serve sets),
registered on ``calibration_client.cli``'s app."""

import csv
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .base import (
    ArrayFile,
    InputOption,
    JsonFlag,
    LabelledFile,
    _arrays,
    _fmt,
    _json_option,
    _labelled,
    _print_json,
    _show,
    _values,
    app,
    examples,
    handled,
    out,
)

Name = Annotated[str, typer.Argument(metavar="NAME", help="Calibrator name.", show_default=False)]
VersionNumber = Annotated[int, typer.Argument(metavar="VERSION", help="Version number.", min=1,
                                              show_default=False)]


def _levels(text: str) -> list[float]:
    try:
        return [float(item) for item in text.split(",") if item.strip()]
    except ValueError as exc:
        raise typer.BadParameter(f"--coverage takes comma-separated levels such as 0.9,0.95, not {text!r}") from exc


def _show_set_predictor(found: dict) -> None:
    thresholds = ", ".join(f"{c}: {_fmt(q) if not isinstance(q, list) else '[' + ', '.join(map(_fmt, q)) + ']'}"
                           for c, q in zip(found["coverage"], found["thresholds"], strict=True))
    out.print(f"[bold]{found['name']}[/bold] version [bold]{found['version']}[/bold] set predictor "
              f"[bold]{found['id']}[/bold]: {found['score']}"
              f"{' class-conditional' if found['class_conditional'] else ''} on {found['n_samples']} held-out rows; "
              f"thresholds {thresholds}", soft_wrap=True)


SET_PREDICTOR_EXAMPLES = examples(
    "$ calibration set-predictor resnet50 1 held_out.npz --coverage 0.9,0.95 --score aps",
    "$ calibration set-predictor resnet50 1 --observations '{\"source\": \"upload\"}' --coverage 0.9",
    "Use rows the calibrator was not fitted on; then `calibration sets resnet50 batch.npy --coverage 0.9`.",
)


@app.command("set-predictor", epilog=SET_PREDICTOR_EXAMPLES)
@handled
def set_predictor(
    context: typer.Context,
    name: Name,
    version: VersionNumber,
    file: Annotated[Path | None, LabelledFile] = None,
    coverage: Annotated[str, typer.Option(help="Coverage levels, comma-separated.")] = "0.9",
    score: Annotated[str, typer.Option(help="Conformity score: lac, aps or raps.")] = "aps",
    class_conditional: Annotated[bool, typer.Option(help="One threshold per class (coverage per class).")] = False,
    k_reg: Annotated[int, typer.Option(help="RAPS: ranks not penalised.", min=0)] = 0,
    lam: Annotated[float, typer.Option(help="RAPS: penalty per rank beyond k_reg.", min=0.0)] = 0.0,
    randomized: Annotated[bool, typer.Option(help="APS/RAPS: randomised scores.")] = False,
    seed: Annotated[int, typer.Option(help="Seed of the fit's uniforms.", min=0)] = 0,
    adaptive: Annotated[str | None, typer.Option(
        help="Keep the served coverage under drift from late labels: aci or dtaci.", show_default=False)] = None,
    adaptive_gamma: Annotated[float | None, typer.Option(help="ACI's step gamma (--adaptive aci).",
                                                         show_default=False)] = None,
    observations: Annotated[str | None, typer.Option(
        help='Fit on stored observations instead of FILE: a query as JSON, e.g. \'{"last": 5000}\'.',
        show_default=False)] = None,
    input: InputOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Fit a conformal set predictor of VERSION on held-out FILE.npz (logits/probabilities and labels)
    or on stored observations, and store it with the version."""
    if (file is None) == (observations is None):
        raise typer.BadParameter("give FILE.npz or --observations (one of them)")
    fields = {"coverage": _levels(coverage), "score": score, "class_conditional": class_conditional,
              "k_reg": k_reg, "lam": lam, "randomized": randomized, "seed": seed, "adaptive": adaptive,
              "adaptive_gamma": adaptive_gamma}
    with context.obj.client() as client:
        if file is not None:
            kind, values, labels = _labelled(file, input)
            found = client.fit_set_predictor(name, version, values, labels, input=kind, **fields)
        else:
            found = client.fit_set_predictor(name, version, observations=_json_option(observations,
                                                                                      "--observations"), **fields)
    if as_json:
        _print_json(found)
        return
    _show_set_predictor(found)


@app.command("set-predictors")
@handled
def set_predictors(
    context: typer.Context,
    name: Name,
    version: VersionNumber,
    delete: Annotated[int | None, typer.Option(help="Delete the set predictor with this id.", min=1,
                                               show_default=False)] = None,
    as_json: JsonFlag = False,
) -> None:
    """The set predictors of VERSION, newest first (--delete ID deletes one)."""
    with context.obj.client() as client:
        if delete is not None:
            client.delete_set_predictor(name, version, delete)
            out.print(f"deleted set predictor {delete} of {name} version {version}")
            return
        found = client.set_predictors(name, version)
    if as_json:
        _print_json(found)
        return
    table = Table()
    for column in ("id", "score", "coverage", "class-conditional", "rows", "source", "created"):
        table.add_column(column, justify="right" if column in ("id", "rows") else "left")
    for p in found:
        table.add_row(str(p["id"]), p["score"], ", ".join(map(str, p["coverage"])),
                      "yes" if p["class_conditional"] else "no", str(p["n_samples"]), p["source"]["kind"],
                      str(p["created_at"])[:19])
    _show(f"{name} version {version}", table)


def _write_sets(path: Path, sets) -> str:
    """``--out``: ``.npz`` (the mask, and ids), ``.npy`` (the uint8 mask) or ``.csv`` (id, then the set's
    classes separated by spaces)."""
    import numpy as np

    mask = np.asarray(sets)
    if path.suffix == ".npz":
        np.savez(path, sets=mask, **({"ids": np.asarray(sets.ids)} if sets.ids is not None else {}))
        return "set mask"
    if path.suffix == ".csv":
        with path.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["row" if sets.ids is None else "id", "set"])
            for row, classes in enumerate(sets.classes()):
                writer.writerow([row if sets.ids is None else sets.ids[row], " ".join(map(str, classes))])
        return "sets"
    np.save(path, mask.astype(np.uint8))
    return "set mask"


@app.command()
@handled
def sets(
    context: typer.Context,
    ref: Annotated[str, typer.Argument(metavar="REF", help="NAME (latest version) or NAME@ALIAS.",
                                       show_default=False)],
    file: Annotated[Path, ArrayFile],
    coverage: Annotated[float, typer.Option(help="A coverage level the version's set predictor was fitted at.",
                                            min=0.0, max=1.0)] = 0.9,
    version: Annotated[int | None, typer.Option(help="Pin a version.", min=1, show_default=False)] = None,
    set_predictor_id: Annotated[int | None, typer.Option("--set-predictor", help="Use this set predictor "
                                                         "(default: the version's newest at the level).",
                                                         min=1, show_default=False)] = None,
    out_file: Annotated[Path | None, typer.Option(
        "--out", help="Write every row: FILE.npy (uint8 mask), FILE.npz (mask, and ids) or FILE.csv.",
        dir_okay=False, show_default=False)] = None,
    input: InputOption = None,
    rows: Annotated[int, typer.Option(help="Rows to show when not writing --out.", min=0)] = 10,
) -> None:
    """Conformal prediction sets of FILE.npy (one array) or FILE.npz (its logits/probabilities): each
    row's classes, a set that holds the true class with the given coverage."""
    import numpy as np

    arrays = _arrays(file)
    kind, values = _values(arrays, file, input)
    with context.obj.client() as client:
        found = client.calibrate(ref, values, version=version, input=kind, outputs=["set"], coverage=coverage,
                                 set_predictor=set_predictor_id)
        class_names = client.version(found.name, found.version).class_names
    served = f"{found.name} version {found.version} set predictor {found.set_predictor} at coverage {coverage}"
    if out_file is not None:
        what = _write_sets(out_file, found)
        out.print(f"wrote {len(found)} rows' {what} from {served} to {out_file}")
        return
    table = Table()
    for column in ("row", "size", "set"):
        table.add_column(column, justify="left" if column == "set" else "right")
    for row, classes in enumerate(found.classes()[:rows]):
        table.add_row(str(row), str(len(classes)),
                      ", ".join(class_names[c] if class_names else str(c) for c in classes))
    sizes = np.asarray(found).sum(axis=1)
    _show(f"{served}: {len(found)} rows, mean set size {sizes.mean():.3f}"
          f"{' (first ' + str(rows) + ')' if len(found) > rows else ''}", table)
