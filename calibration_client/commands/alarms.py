"""``calibration alarms | label-shift``: the drift monitors' verdicts (e-values against their
thresholds) and the label-shift test, from a terminal.

Anytime-valid drift monitors: an e-value that reaches ``1/alpha`` alarms, with false-alarm
probability at most ``alpha`` over the monitor's life; the label-shift test is a likelihood-ratio
test (Wilks)."""

import math
from typing import Annotated

import typer
from rich.table import Table

from .base import JsonFlag, Name, _fmt, _print_json, app, examples, handled, out


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
