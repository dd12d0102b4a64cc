"""``calibration alarms | label-shift | evaluate | evaluations | promote | gate | rollback | history |
policy``: the online loop's decisions from a terminal (issue #37), registered on
``calibration_client.cli``'s app.

Each prints what a person decides on (verdicts, e-values against their thresholds, confidence
sequences, where an alias points) and, with ``--json``, the service's answer for scripts. The
statistics are the service's: anytime-valid drift monitors (an e-value that reaches ``1/alpha``
alarms, with false-alarm probability at most ``alpha`` over the monitor's life), the paired
evaluation's confidence sequence on the loss difference (challenger minus champion: below zero
favours the challenger), and the label-shift likelihood-ratio test (Wilks)."""

from __future__ import annotations

import math
from typing import Annotated, Any

import typer
from rich.table import Table

from .cli_base import JsonFlag, _fmt, _json_option, _print_json, _spinner, app, examples, handled, out
from .cli_online import Name
from .models import Job

Alias = Annotated[str, typer.Argument(metavar="ALIAS", help="Alias, e.g. production.", show_default=False)]
Version = Annotated[int, typer.Argument(metavar="VERSION", help="Version number.", min=1, show_default=False)]


def _ref(value: str) -> int | str:
    """A version number (digits) or an alias, as the evaluation body takes them."""
    return int(value) if value.isdigit() else value


def _e_value(log_e: float) -> str:
    """An e-value from its log, readable at any size (``1.24e+17``, not 124398034511560224.0000)."""
    return f"{math.exp(log_e):.3g}" if log_e < 700 else f"e^{log_e:.0f}"


# -- drift alarms --------------------------------------------------------------------------------------


@app.command(epilog=examples(
    "$ calibration alarms resnet",
    "$ calibration alarms resnet --evaluate --alpha 0.01 --tolerance 0.02",
    "$ calibration alarms resnet --drift 0.05",
    "  (label-free monitors also say how many reference rows a 0.05 drift of the expected confidence needs)"))
@handled
def alarms(context: typer.Context, name: Name,
           evaluate: Annotated[bool, typer.Option(
               "--evaluate", help="First feed the monitors the rows that arrived since their last run.")] = False,
           alpha: Annotated[float | None, typer.Option(help="With --evaluate: false-alarm probability, ever "
                                                            "(service default 0.01).", show_default=False)] = None,
           tolerance: Annotated[float | None, typer.Option(
               help="With --evaluate: drift of mean confidence minus accuracy that is no alarm (default 0.02).",
               show_default=False)] = None,
           half_life: Annotated[float | None, typer.Option(
               help="With --evaluate: rows of the bet's memory (default 1000).", show_default=False)] = None,
           class_tolerance: Annotated[float | None, typer.Option(
               help="With --evaluate: drift of a class's mean probability minus its frequency that is no alarm "
                    "(default 0.02).", show_default=False)] = None,
           drift: Annotated[float | None, typer.Option(
               help="A drift of the expected confidence (0-1): the reference rows label-free monitors need for it.",
               show_default=False)] = None,
           as_json: JsonFlag = False) -> None:
    """NAME's drift monitors, one per served version and signal (labelled feedback, or label-free
    logged predictions): rows seen, e-value against its threshold 1/alpha, and the alarms raised."""
    options = {"alpha": alpha, "tolerance": tolerance, "half_life": half_life, "class_tolerance": class_tolerance}
    if not evaluate and any(value is not None for value in options.values()):
        raise typer.BadParameter("--alpha, --tolerance, --half-life and --class-tolerance go with --evaluate")
    with context.obj.client() as client:
        answer = client.evaluate_alarms(name, **options) if evaluate else None
        if answer is None or drift is not None:
            answer = {**client.alarms(name, drift=drift), **({"new_alarms": answer["new_alarms"]} if answer else {})}
    if as_json:
        _print_json(answer)
        return
    raised = answer["alarms"]
    head = (f"{len(raised)} alarm{'s' if len(raised) != 1 else ''}: " + ", ".join(
        f"version {a['version']} {a['signal']} at row {a['alarm_rows']}" for a in raised)) if raised else "no alarms"
    new = answer.get("new_alarms")
    out.print(f"[bold]{name}[/bold]: {head}" + (f"; {len(new)} new" if new else ""), soft_wrap=True)
    if not answer["monitors"]:
        out.print("no monitors yet: post labels (`calibration label`) or log predictions, then "
                  f"`calibration alarms {name} --evaluate`", soft_wrap=True)
        return
    table = Table()
    columns = ["version", "signal", "rows", "e-value", "threshold", "alarm", "ECE"]
    if drift is not None:
        columns.append(f"rows for drift {drift:g}")
    for column in columns:
        table.add_column(column, justify="left" if column in ("signal", "alarm") else "right")
    for monitor in answer["monitors"]:
        reference = monitor.get("reference") or {}
        row = [str(monitor["version"]), monitor["signal"], str(monitor["n_rows"]), _e_value(monitor["log_e_value"]),
               _e_value(monitor["threshold_log_e_value"]),
               f"at row {monitor['alarm_rows']}" if monitor["alarm"] else "no", _fmt(monitor.get("ece"))]
        if drift is not None:
            row.append(_fmt(reference.get("rows_needed")))
        table.add_row(*row)
    out.print(table)


# -- label shift ---------------------------------------------------------------------------------------


@app.command("label-shift", epilog=examples(
    "$ calibration label-shift resnet",
    "$ calibration label-shift resnet --last 10000 --alpha 0.01 --version 3"))
@handled
def label_shift(context: typer.Context, name: Name,
                version: Annotated[int | None, typer.Option(help="Only the rows this version served.", min=1,
                                                            show_default=False)] = None,
                last: Annotated[int | None, typer.Option(help="The newest LAST logged rows (default 50000).", min=1,
                                                         show_default=False)] = None,
                alpha: Annotated[float | None, typer.Option(help="Level of the test of no prior shift (default "
                                                                 "0.05).", show_default=False)] = None,
                as_json: JsonFlag = False) -> None:
    """The class priors of NAME's logged predictions estimated without labels (EM and BBSE)
    against those of its labelled observations, the likelihood-ratio test of no shift, and the
    priors to serve (calibrate with "priors") when it rejects."""
    with context.obj.client() as client:
        answer = client.label_shift(name, version=version, last=last, alpha=alpha)
    if as_json:
        _print_json(answer)
        return
    suggestion = answer["suggestion"]
    test = suggestion["test"]
    verdict = "shifted" if test["p_value"] < test["alpha"] else "no shift shown"
    out.print(f"[bold]{name}[/bold]: {answer['n_predictions']} logged predictions against {answer['n_source_rows']} "
              f"labelled rows: {verdict} (likelihood ratio {test['statistic']:.4g} on {test['degrees_of_freedom']} "
              f"df, p = {test['p_value']:.3g}, alpha = {test['alpha']:g})", soft_wrap=True)
    table = Table()
    for column in ("class", "source", "EM", "BBSE", "suggested"):
        table.add_column(column, justify="left" if column == "class" else "right")
    em, bbse = (answer.get("em") or {}).get("priors"), (answer.get("bbse") or {}).get("priors")
    for k, source in enumerate(answer["source_priors"]):
        table.add_row(str(k), f"{source:.4f}", _fmt(em[k] if em else None), _fmt(bbse[k] if bbse else None),
                      f"{suggestion['suggested_priors'][k]:.4f}")
    out.print(table)
    if suggestion["adjust"]:
        out.print(f"adjust: calibrate with \"priors\": the suggested column (the source priors moved "
                  f"{suggestion['shrinkage']:.4f} of the way to the shift-corrected estimate)", soft_wrap=True)
    else:
        out.print("adjust: no, serve unadjusted")


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


# -- refit policies ------------------------------------------------------------------------------------

policy_app = typer.Typer(name="policy", no_args_is_help=True, rich_markup_mode="rich",
                         help="Show, set and run NAME's refit policy: when to refit, on what, and whether the "
                              "new version replaces an alias's.",
                         epilog=examples("$ calibration policy set resnet --every-labels 5000 --alias production "
                                         "--promote", "$ calibration policy run resnet",
                                         "$ calibration policy show resnet"))
app.add_typer(policy_app)

POLICY_FIELDS = ("every_labels", "on_alarm", "every_seconds", "last", "holdout", "method", "options", "alias",
                 "promote", "alpha")


def _show_policy(policy: dict) -> None:
    triggers = [f"every {policy['every_labels']} labels" if policy.get("every_labels") else None,
                "on a drift alarm" if policy.get("on_alarm") else None,
                f"every {policy['every_seconds']:g} s" if policy.get("every_seconds") else None]
    target = (f"; must beat {policy['alias']} at alpha {policy['alpha']:g}"
              + (", promoted when it does" if policy.get("promote") else "")) if policy.get("alias") else ""
    out.print(f"[bold]{policy['name']}[/bold] refits {' or '.join(t for t in triggers if t)}: {policy['method']} "
              f"on the newest {policy['last']} observations less {policy['holdout']:.0%} held out{target}",
              soft_wrap=True)
    out.print(f"last run: {policy.get('last_run_at') or 'never'}; last job: {policy.get('last_job') or '—'}",
              soft_wrap=True)


@policy_app.command("show", epilog=examples("$ calibration policy show resnet"))
@handled
def policy_show(context: typer.Context, name: Name, as_json: JsonFlag = False) -> None:
    """NAME's refit policy, when it last ran and its last job."""
    with context.obj.client() as client:
        answer = client.policy(name)
    if as_json:
        _print_json(answer)
        return
    _show_policy(answer)


@policy_app.command("set", epilog=examples(
    "$ calibration policy set resnet --every-labels 5000 --on-alarm --alias production --promote",
    "  (refit after 5000 new labels or a drift alarm; promote when the new version beats production)"))
@handled
def policy_set(context: typer.Context, name: Name,
               every_labels: Annotated[int | None, typer.Option(help="Refit once this many labelled observations "
                                                                     "arrived.", min=1, show_default=False)] = None,
               on_alarm: Annotated[bool, typer.Option("--on-alarm", help="Refit on a drift alarm.")] = False,
               every_seconds: Annotated[float | None, typer.Option(help="Refit on a schedule (>= 60).",
                                                                   show_default=False)] = None,
               last: Annotated[int | None, typer.Option(help="Refit on the newest LAST observations (default "
                                                             "50000).", show_default=False)] = None,
               holdout: Annotated[float | None, typer.Option(help="Their newest fraction kept to evaluate (default "
                                                                  "0.2).", show_default=False)] = None,
               method: Annotated[str | None, typer.Option(help="The refit's method (default auto).",
                                                          show_default=False)] = None,
               options: Annotated[str | None, typer.Option(help="Its options as JSON.", show_default=False)] = None,
               alias: Annotated[str | None, typer.Option(help="The alias the new version must beat.",
                                                         show_default=False)] = None,
               promote: Annotated[bool, typer.Option("--promote", help="Move ALIAS when the verdict favours "
                                                                       "the new version.")] = False,
               alpha: Annotated[float | None, typer.Option(help="Level of the verdict (default 0.05).",
                                                           show_default=False)] = None,
               as_json: JsonFlag = False) -> None:
    """Set (replace) NAME's refit policy; it needs a trigger (--every-labels, --on-alarm or --every-seconds)."""
    given = dict(zip(POLICY_FIELDS, (every_labels, on_alarm or None, every_seconds, last, holdout, method,
                                     _json_option(options, "--options"), alias, promote or None, alpha), strict=True))
    with context.obj.client() as client:
        answer = client.set_policy(name, **{key: value for key, value in given.items() if value is not None})
    if as_json:
        _print_json(answer)
        return
    _show_policy(answer)


@policy_app.command("run", epilog=examples(
    "$ calibration policy run resnet",
    "  (from a scheduler, or after posting labels: refits only when a trigger fired)",
    "$ calibration policy run resnet --force --no-wait"))
@handled
def policy_run(context: typer.Context, name: Name,
               force: Annotated[bool, typer.Option("--force", help="Refit even if no trigger fired.")] = False,
               wait: Annotated[bool, typer.Option(help="Follow the refit job to its end.")] = True,
               as_json: JsonFlag = False) -> None:
    """Check NAME's refit policy; when a trigger fired, refit (a job), evaluate against its alias
    and, with promote, move the alias."""
    with context.obj.client() as client, _spinner("") as progress:
        progress.add_task(f"checking {name}'s refit policy", total=None)
        answer = client.run_policy(name, force=force, wait=wait, poll=0.25)
    if as_json:
        _print_json(answer.raw if isinstance(answer, Job) else answer)
        return
    if isinstance(answer, Job):  # --no-wait
        out.print(f"{name}: refitting as job {answer.id} (follow it with `calibration jobs {answer.id} --wait`)")
    elif not answer.get("version"):
        out.print(f"[bold]{name}[/bold]: no trigger fired since {answer.get('since')}; nothing to do", soft_wrap=True)
    else:
        verdict = f"; {answer['verdict']} (evaluation {answer['evaluation']})" if answer.get("evaluation") else ""
        outcome = "; promoted" if answer.get("promoted") else (f"; {answer['reason']}" if answer.get("reason") else "")
        out.print(f"[bold]{name}[/bold] version [bold]{answer['version']}[/bold] refitted: "
                  f"{'; '.join(answer['reasons'])}{verdict}{outcome}", soft_wrap=True)
