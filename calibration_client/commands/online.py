"""``calibration observe | logging | label | observations | refit``: the online loop from a
terminal, registered on ``calibration_client.cli``'s app."""

import csv
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .base import (
    InputOption,
    JsonFlag,
    LabelledFile,
    Name,
    _arrays,
    _json_option,
    _labelled,
    _parameters,
    _print_json,
    _spinner,
    app,
    examples,
    handled,
    out,
)

LabelFile = typer.Argument(metavar="FILE", exists=True, dir_okay=False, readable=True, show_default=False,
                           help="A CSV of id,label rows (a header row is skipped), or an .npz with ids and labels.")


def _ids_and_labels(path: Path) -> tuple[list[str], list[int]]:
    if path.suffix == ".npz":
        arrays = _arrays(path)
        if "ids" not in arrays or "labels" not in arrays:
            raise typer.BadParameter(f"{path} needs 'ids' and 'labels' arrays (it has {', '.join(arrays)})")
        return [str(i) for i in arrays["ids"].tolist()], [int(y) for y in arrays["labels"].tolist()]
    ids, labels = [], []
    with path.open(newline="") as handle:
        for number, row in enumerate(csv.reader(handle)):
            if not row:
                continue
            if len(row) != 2:
                raise typer.BadParameter(f"{path} line {number + 1}: expected id,label")
            try:
                labels.append(int(row[1]))
            except ValueError as exc:
                if number == 0:
                    continue  # a header
                raise typer.BadParameter(f"{path} line {number + 1}: label {row[1]!r} is not an integer") from exc
            ids.append(row[0])
    return ids, labels


@app.command(epilog=examples(
    "$ calibration observe resnet labelled-week-47.npz",
    "$ calibration observe resnet old.npz --observed-at 2026-11-01T00:00:00+00:00  (back-fill)"))
@handled
def observe(context: typer.Context, name: Name, file: Annotated[Path, LabelledFile], input: InputOption = None,
            observed_at: Annotated[str | None, typer.Option(help="ISO 8601 time with offset, to back-fill.",
                                                            show_default=False)] = None,
            as_json: JsonFlag = False) -> None:
    """Append FILE.npz (logits/probabilities/scores and labels) to NAME's observations."""
    kind, values, labels = _labelled(file, input)
    with context.obj.client() as client:
        answer = client.observe(name, values, labels, input=kind, observed_at=observed_at)
    if as_json:
        _print_json(answer)
        return
    out.print(f"[bold]{name}[/bold]: appended {answer['appended']} rows, {answer['total_rows']} in all"
              + _online_note(answer))


@app.command("logging", epilog=examples(
    "$ calibration logging resnet 0.1",
    "  (then `calibration calibrate resnet FILE --out served.csv` writes the ids to label)",
    "$ calibration logging resnet 0"))
@handled
def set_logging(context: typer.Context, name: Name,
                rate: Annotated[float, typer.Argument(metavar="RATE", help="Share of served rows logged, 0-1.")],
                as_json: JsonFlag = False) -> None:
    """Log RATE of the rows NAME serves, with prediction ids (0 turns logging off)."""
    with context.obj.client() as client:
        answer = client.set_logging(name, rate)
    if as_json:
        _print_json(answer)
        return
    out.print(f"[bold]{name}[/bold] logs {answer['sample_rate']:.0%} of the rows it serves")


@app.command(epilog=examples(
    "$ calibration label resnet labels.csv",
    "  (labels.csv: id,label rows, the ids `calibration calibrate` wrote)"))
@handled
def label(context: typer.Context, name: Name, file: Annotated[Path, LabelFile], as_json: JsonFlag = False) -> None:
    """Post the labels of logged predictions (FILE: id,label rows) to NAME."""
    ids, labels = _ids_and_labels(file)
    with context.obj.client() as client:
        answer = client.label(name, ids, labels)
    if as_json:
        _print_json(answer)
        return
    counts = ", ".join(f"{count} {status}" for status, count in sorted(answer["counts"].items()))
    out.print(f"[bold]{name}[/bold]: {counts}" + _online_note(answer))


def _online_note(answer: dict) -> str:
    """Where an online calibrator stored an update (``online_version``), say which version."""
    version = answer.get("online_version")
    return f"; the online calibrator updated to version {version}" if version is not None else ""


@app.command(epilog=examples("$ calibration observations resnet"))
@handled
def observations(context: typer.Context, name: Name, as_json: JsonFlag = False) -> None:
    """Summarise NAME's observations: per source, per serving version, per day."""
    with context.obj.client() as client:
        summary = client.observations(name)
    if as_json:
        _print_json(summary)
        return
    out.print(f"[bold]{name}[/bold]: {summary['total_rows']} rows of {summary['input_kind']} "
              f"({summary['n_classes']} classes); prediction log at {summary['prediction_log']['sample_rate']:.0%}, "
              f"{summary['prediction_log']['logged']} logged, {summary['prediction_log']['labelled']} labelled")
    for title, counts in (("source", summary["by_source"]), ("serving version", summary["by_version"]),
                          ("day", summary["by_day"])):
        if counts:
            table = Table(title=f"by {title}")
            table.add_column(title)
            table.add_column("rows", justify="right")
            for key, count in counts.items():
                table.add_row(str(key), str(count))
            out.print(table)


@app.command(epilog=examples(
    "$ calibration refit resnet --method auto --last 50000",
    "$ calibration refit resnet --source feedback"))
@handled
def refit(context: typer.Context, name: Name,
          method: Annotated[str, typer.Option(help="A method, or auto.")] = "temperature",
          options: Annotated[str | None, typer.Option(help="Method options as JSON.", show_default=False)] = None,
          last: Annotated[int | None, typer.Option(help="Only the newest LAST rows.", show_default=False)] = None,
          source: Annotated[str | None, typer.Option(help="upload or feedback.", show_default=False)] = None,
          as_json: JsonFlag = False) -> None:
    """Fit a new version of NAME on its stored observations."""
    selection = {key: value for key, value in (("last", last), ("source", source)) if value is not None}
    with context.obj.client() as client, _spinner("") as progress:
        progress.add_task(f"fitting {method} on the stored observations", total=None)
        version = client.fit_stored(name, method, options=_json_option(options, "--options"), observations=selection)
    if as_json:
        _print_json(version.raw)
        return
    out.print(f"[bold]{version.name}[/bold] version [bold]{version.version}[/bold]: {version.method} on "
              f"{version.n_samples} stored rows; parameters: {_parameters(version.parameters)}", soft_wrap=True)


@app.command(epilog=examples(
    "$ calibration quality resnet",
    "$ calibration quality resnet --window 1000 --windows 5",
    "  (windows of 1000 rows instead of days; the newest 5)",
    "$ calibration quality resnet --window hour --version 2 --bootstrap 0"))
@handled
def quality(context: typer.Context, name: Name,
            window: Annotated[str, typer.Option(help="hour, day, or a number of rows per window.")] = "day",
            version: Annotated[int | None, typer.Option(help="Score every row through this version.",
                                                        show_default=False)] = None,
            windows: Annotated[int, typer.Option(help="How many of the newest windows.", min=1)] = 12,
            bootstrap: Annotated[int, typer.Option(help="Bootstrap resamples of the intervals.", min=0)] = 100,
            as_json: JsonFlag = False) -> None:
    """Calibration quality of NAME's stored observations per window: ECE (with its interval),
    NLL and accuracy, calibrated and not."""
    with context.obj.client() as client:
        answer = client.quality(name, window=window, version=version, windows=windows, bootstrap=bootstrap)
    if as_json:
        _print_json(answer)
        return
    table = Table(title=f"{name}: quality per {window}")
    for column in ("window", "rows", "ECE", "ECE uncalibrated", "NLL", "accuracy"):
        table.add_column(column, justify="left" if column == "window" else "right")

    def ece(metrics: dict) -> str:
        value = metrics["ece"]
        interval = f" [{value['low']:.4f}, {value['high']:.4f}]" if value.get("low") is not None else ""
        return f"{value['estimate']:.4f}{interval}"

    for row in answer["windows"]:
        calibrated = row["calibrated"]
        table.add_row(str(row["window"]), str(row["n_rows"]), ece(calibrated), ece(row["uncalibrated"]),
                      f"{calibrated['nll']['estimate']:.4f}", f"{calibrated['accuracy']['estimate']:.4f}")
    out.print(table)


def _rate(entry: dict) -> str:
    return f"{entry['rate']:.3f} [{entry['low']:.3f}, {entry['high']:.3f}]"


def _delay(entry: dict, labels: int) -> str:
    def value(x) -> str:
        return f">{labels}" if x is None else str(x)
    return f"{value(entry['estimate'])} [{value(entry['low'])}, {value(entry['high'])}]"


@app.command()
@handled
def power(context: typer.Context, name: Name,
          shift: Annotated[str, typer.Option(help="temperature (logits times SIZE), tweak_one (one class at prior "
                                                  "SIZE), dirichlet (priors ~ Dirichlet(SIZE)) or swap (SIZE class "
                                                  "pairs' labels exchanged).")] = "temperature",
          size: Annotated[float, typer.Option(help="The shift's size.")] = 1.25,
          labels: Annotated[int, typer.Option(help="Labels per stream: detection within this many.", min=1)] = 50_000,
          streams: Annotated[int, typer.Option(help="Simulated streams.", min=1)] = 200,
          signal: Annotated[str, typer.Option(help="labelled, or label_free (logged predictions against a "
                                                   "reference).")] = "labelled",
          version: Annotated[int | None, typer.Option(help="The version (default: the latest).",
                                                      show_default=False)] = None,
          shift_class: Annotated[int | None, typer.Option(help="tweak_one: the class (default: random per stream).",
                                                          show_default=False)] = None,
          swap_classes: Annotated[str | None, typer.Option(help="swap of one pair: the two classes, e.g. 3,5 "
                                                                "(default: random per stream).",
                                                           show_default=False)] = None,
          alpha: Annotated[float, typer.Option(help="The monitor's false-alarm probability.")] = 0.01,
          tolerance: Annotated[float, typer.Option(help="The monitor's tolerance.")] = 0.02,
          seed: Annotated[int, typer.Option(help="Seed of the simulation.")] = 0,
          as_json: JsonFlag = False) -> None:
    """How often and how fast NAME's drift monitor would alarm under a shift, and how often without one
    (a job simulating STREAMS streams drawn from NAME's stored labelled observations).

    Example: calibration power demo --shift temperature --size 1.25 --labels 50000
    """
    pair = None
    if swap_classes is not None:
        try:
            pair = [int(c) for c in swap_classes.split(",")]
        except ValueError as exc:
            raise typer.BadParameter(f"--swap-classes takes two class numbers, e.g. 3,5; got {swap_classes!r}") \
                from exc
    with context.obj.client() as client, _spinner("") as progress:
        task = progress.add_task(f"simulating {streams} streams", total=None)
        answer = client.power(name, shift, size, labels=labels, streams=streams, signal=signal, version=version,
                              shift_class=shift_class, swap_classes=pair, alpha=alpha, tolerance=tolerance,
                              class_tolerance=tolerance, seed=seed,
                              progress=lambda percent: progress.update(
                                  task, description=f"simulating {streams} streams: {percent:.0f}%"))
    if as_json:
        _print_json(answer)
        return
    out.print(f"[bold]{name}[/bold] version {answer['version']}, {answer['signal']} monitor (alpha {alpha}, "
              f"tolerance {tolerance}): {shift} {size} on {answer['rows']} stored rows", soft_wrap=True)
    table = Table()
    for column in ("streams", f"alarmed within {labels}", "median labels to alarm", "10% / 90%",
                   "drift (conf - acc)", "drift visible"):
        table.add_column(column, justify="left" if column == "streams" else "right")
    for run in ("shifted", "null"):
        entry = answer[run]
        low, median, high = entry["delay"]
        table.add_row(f"{run} ({entry['streams']})", _rate(entry["detected"]), _delay(median, labels),
                      f"{_delay(low, labels).split()[0]} / {_delay(high, labels).split()[0]}",
                      f"{entry['drift']['confidence_gap_median']:.4f}", f"{entry['drift']['visible_share']:.0%}")
    out.print(table)
    within = ", ".join(f"{w['labels']}: {w['rate']:.2f}" for w in answer["shifted"]["within"])
    out.print(f"detection probability within N labels (shifted): {within}", soft_wrap=True)
