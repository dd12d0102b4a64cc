"""``calibration evaluate | evaluations | promote | gate | rollback | history``: the online loop's
decisions from a terminal: the paired evaluation's verdict and its confidence sequence on the loss
difference (challenger minus champion: below zero favours the challenger), and where an alias
points, with ``--json`` the service's answer for scripts."""

from typing import Annotated, Any

import typer
from rich.table import Table

from .base import JsonFlag, Name, _fmt, _print_json, app, examples, handled, out

Alias = Annotated[str, typer.Argument(metavar="ALIAS", help="Alias, e.g. production.", show_default=False)]
Version = Annotated[int, typer.Argument(metavar="VERSION", help="Version number.", min=1, show_default=False)]


def _ref(value: str) -> int | str:
    """A version number (digits) or an alias, as the evaluation body takes them."""
    return int(value) if value.isdigit() else value


# -- evaluations ---------------------------------------------------------------------------------------


def _show_evaluation(evaluation: dict) -> None:
    champion = evaluation["champion"]
    against = "what served the rows" if champion == "served" else f"version {champion}"
    out.print(f"[bold]{evaluation['name']}[/bold]: version {evaluation['challenger']} against {against} on "
              f"{evaluation['n_rows']} rows: [bold]{evaluation['verdict']}[/bold] (alpha = {evaluation['alpha']:g}, "
              f"decided on {evaluation['decided_on']})", soft_wrap=True)
    out.print(f"evaluation {evaluation['id']}", soft_wrap=True)
    table = Table()
    for column in ("metric", "challenger", "champion", "difference", "confidence sequence"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for loss in ("nll", "brier"):
        row = evaluation[loss]
        low, high = row["confidence_sequence"]
        table.add_row(loss, f"{row['challenger']:.4f}", f"{row['champion']:.4f}", f"{row['difference']:+.4f}",
                      f"[{low:+.4f}, {high:+.4f}]")
    for metric, label in (("ece", "ECE"), ("kde_ece", "KDE-ECE")):
        sides = [evaluation[metric][side] for side in ("challenger", "champion")]
        cells = [f"{s['estimate']:.4f}" + (f" [{s['low']:.4f}, {s['high']:.4f}]" if s.get("low") is not None else "")
                 for s in sides]
        table.add_row(label, *cells, "", "")
    out.print(table)


@app.command(epilog=examples(
    "$ calibration evaluate resnet 2 production",
    "  (version 2 against the version production points at, on the rows neither was fitted on)",
    "$ calibration evaluate resnet 2",
    "  (no champion: against what served each labelled row)",
    "$ calibration evaluate resnet 2 1 --alpha 0.01 --decide-on brier --since 2026-11-01T00:00:00+00:00"))
@handled
def evaluate(context: typer.Context, name: Name,
             challenger: Annotated[str, typer.Argument(metavar="CHALLENGER", help="Version number or alias.",
                                                       show_default=False)],
             champion: Annotated[str | None, typer.Argument(
                 metavar="[CHAMPION]", help="Version number or alias (default: what served each row).",
                 show_default=False)] = None,
             alpha: Annotated[float, typer.Option(help="Error level of the confidence sequences and verdict.",
                                                  min=1e-10, max=0.5)] = 0.05,
             decide_on: Annotated[str | None, typer.Option(help="nll or brier (default nll).",
                                                           show_default=False)] = None,
             last: Annotated[int | None, typer.Option(help="Only the newest LAST observations.", min=1,
                                                      show_default=False)] = None,
             since: Annotated[str | None, typer.Option(help="Observations created from (ISO 8601 with offset).",
                                                       show_default=False)] = None,
             until: Annotated[str | None, typer.Option(help="Observations created before (ISO 8601 with offset).",
                                                       show_default=False)] = None,
             source: Annotated[str | None, typer.Option(help="upload or feedback.", show_default=False)] = None,
             bootstrap: Annotated[int | None, typer.Option(help="Bootstrap resamples of the ECE intervals "
                                                                "(default 200; 0: none).", min=0, max=2000,
                                                           show_default=False)] = None,
             as_json: JsonFlag = False) -> None:
    """Evaluate CHALLENGER against CHAMPION on NAME's held-out observations: mean NLL and Brier
    of each, the anytime-valid confidence sequence of their difference (challenger minus
    champion), ECEs with intervals, and the verdict a gated alias accepts as evidence."""
    selection = {key: value for key, value in (("last", last), ("since", since), ("until", until),
                                               ("source", source)) if value is not None}
    with context.obj.client() as client:
        evaluation = client.evaluate(name, _ref(challenger), None if champion is None else _ref(champion),
                                     alpha=alpha, observations=selection or None, decide_on=decide_on,
                                     bootstrap=bootstrap)
    if as_json:
        _print_json(evaluation)
        return
    _show_evaluation(evaluation)
    if evaluation["verdict"] == "challenger_better":
        out.print(f"promote with: calibration promote {name} ALIAS {evaluation['challenger']} "
                  f"--evaluation {evaluation['id']}", soft_wrap=True)


@app.command(epilog=examples("$ calibration evaluations resnet", "$ calibration evaluations resnet 3f2a9c…"))
@handled
def evaluations(context: typer.Context, name: Name,
                evaluation_id: Annotated[str | None, typer.Argument(
                    metavar="[ID]", help="Show this evaluation in full.", show_default=False)] = None,
                limit: Annotated[int, typer.Option(help="How many of the newest.", min=1, max=1000)] = 20,
                as_json: JsonFlag = False) -> None:
    """NAME's newest evaluations (challenger, champion, rows, level, verdict), or one in full."""
    with context.obj.client() as client:
        answer: Any = client.evaluation(name, evaluation_id) if evaluation_id else client.evaluations(name, limit)
    if as_json:
        _print_json(answer)
        return
    if evaluation_id:
        _show_evaluation(answer)
        return
    table = Table(title=f"{name}: evaluations, newest first")
    for column in ("id", "challenger", "champion", "rows", "alpha", "verdict", "created"):
        table.add_column(column, justify="right" if column in ("challenger", "champion", "rows", "alpha") else "left")
    for e in answer["evaluations"]:
        table.add_row(e["id"], str(e["challenger"]), str(e["champion"] or "served"), str(e["n_rows"]),
                      f"{e['alpha']:g}", e["verdict"], str(e["created_at"])[:19])
    out.print(table)


# -- aliases: promote, gate, rollback, history -----------------------------------------------------------


def _moved(answer: dict, was: int | None, evidence: str | None = None) -> str:
    if was == answer["version"]:
        notes = ["unchanged"]
    else:
        notes = [f"was {was}" if was is not None else "new alias"] + ([f"evidence {evidence}"] if evidence else [])
    return f"{answer['name']}@{answer['alias']} → version {answer['version']} ({'; '.join(notes)})"


@app.command(epilog=examples(
    "$ calibration promote resnet production 2",
    "$ calibration promote resnet production 2 --evaluation 3f2a9c…",
    "  (a gated alias moves only with an evaluation whose verdict favours version 2)"))
@handled
def promote(context: typer.Context, name: Name, alias: Alias, version: Version,
            evaluation: Annotated[str | None, typer.Option(
                help="The evaluation id that favours VERSION (needed by a gated alias).",
                show_default=False)] = None,
            as_json: JsonFlag = False) -> None:
    """Move ALIAS of NAME to VERSION (recorded in its history)."""
    with context.obj.client() as client:
        was = client.calibrator(name).aliases.get(alias)  # the answer names the new version only
        answer = client.promote(name, alias, version, evaluation)
    if as_json:
        _print_json(answer)
        return
    out.print(_moved(answer, was, evaluation), soft_wrap=True)


@app.command(epilog=examples(
    "$ calibration gate resnet production",
    "  (from now on production moves only with an evaluation's evidence)",
    "$ calibration gate resnet production --off"))
@handled
def gate(context: typer.Context, name: Name, alias: Alias,
         off: Annotated[bool, typer.Option("--off", help="Lift the rule: the alias moves freely.")] = False,
         as_json: JsonFlag = False) -> None:
    """Make ALIAS of NAME move only with an evaluation whose verdict favours the new version."""
    with context.obj.client() as client:
        answer = client.gate(name, alias, not off)
    if as_json:
        _print_json(answer)
        return
    rule = ("moves only with an evaluation that favours the new version" if answer["require_evaluation"]
            else "moves freely")
    out.print(f"{answer['name']}@{answer['alias']} {rule}")


@app.command(epilog=examples("$ calibration rollback resnet production"))
@handled
def rollback(context: typer.Context, name: Name, alias: Alias, as_json: JsonFlag = False) -> None:
    """Point ALIAS of NAME back at the version before its last move."""
    with context.obj.client() as client:
        answer = client.rollback(name, alias)
    if as_json:
        _print_json(answer)
        return
    out.print(_moved(answer, answer["move"]["from_version"]), soft_wrap=True)


@app.command(epilog=examples("$ calibration history resnet production"))
@handled
def history(context: typer.Context, name: Name, alias: Alias, as_json: JsonFlag = False) -> None:
    """ALIAS's moves, newest first: from and to which version, by whom, with which evidence."""
    with context.obj.client() as client:
        answer = client.alias_history(name, alias)
    if as_json:
        _print_json(answer)
        return
    gated = "; gated" if answer["require_evaluation"] else ""
    table = Table(title=f"{name}@{alias} → version {_fmt(answer['version'])}{gated}")
    for column in ("moved", "action", "from", "to", "actor", "evaluation"):
        table.add_column(column, justify="right" if column in ("from", "to") else "left")
    for move in answer["moves"]:
        table.add_row(str(move["moved_at"])[:19], move["action"], _fmt(move["from_version"]),
                      _fmt(move["to_version"]), move.get("actor") or "—", move.get("evaluation") or "—")
    out.print(table)
