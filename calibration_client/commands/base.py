"""What every ``calibration`` command shares: the typer app and its global options, the exit
statuses (``EXIT_CODES``), reading arrays from files, and the printing helpers (tables, JSON,
progress).
"""

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .._defaults import DEFAULT_URL
from ..errors import CalibrationError, ConnectionFailed, NotFound

# numpy, httpx (the client) and rich's progress bars are imported where a command uses them: `--help`
# and a command's usage errors need none of them
if TYPE_CHECKING:
    import numpy as np
    from rich.progress import Progress

    from ..client import Client

OK, PROBLEM, USAGE, NOT_FOUND, CONNECTION = 0, 1, 2, 3, 4
EXIT_CODES = (
    "[bold]Exit status[/bold]: 0 done; 1 the service answered with a problem (its detail is printed); "
    "2 usage error (bad arguments, unreadable or incomplete file); 3 not found (calibrator, version, "
    "alias or job); 4 the service could not be reached."
)

app = typer.Typer(
    name="calibration",
    help="Fit, serve and compare probability calibrators on a calibration service.",
    epilog=EXIT_CODES,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)
out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

LONG_FIT_ENTRIES = 1_000_000  # n·k from which `fit` follows the fit as a job, with a progress bar
# names the shared data sets and other tools use for the same arrays
MEMBER_ALIASES = {"probs": "probabilities", "y": "labels"}


class Settings:
    def __init__(self, url: str, api_key: str | None, timeout: float, retries: int):
        self.url, self.api_key, self.timeout, self.retries = url, api_key, timeout, retries

    def client(self) -> "Client":
        from ..client import Client

        return Client(self.url, self.api_key or None, timeout=self.timeout, retries=self.retries)


@app.callback()
def main_options(
    context: typer.Context,
    url: Annotated[str, typer.Option(envvar="CALIBRATION_URL", help="Base URL of the service.")] = DEFAULT_URL,
    api_key: Annotated[str | None, typer.Option(envvar="CALIBRATION_API_KEY", show_default=False,
                                                help="API key (sent as X-API-Key).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for one answer.", min=0.1)] = 300.0,
    retries: Annotated[int, typer.Option(help="Retries on 429, 503 and connection errors.", min=0)] = 3,
) -> None:
    context.obj = Settings(url, api_key, timeout, retries)


def _fail(exc: CalibrationError, code: int) -> None:
    where = f" [dim](request {exc.request_id})[/dim]" if exc.request_id else ""
    head = " ".join(str(part) for part in (exc.status, exc.title) if part)
    err.print(f"[bold red]error[/bold red]: {head + ': ' if head else ''}{exc.detail}{where}", soft_wrap=True,
              markup=True)
    raise typer.Exit(code)


def handled(command: Callable) -> Callable:
    """Turn the client's exceptions into a printed message and the documented exit status."""

    @functools.wraps(command)
    def run(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except NotFound as exc:
            _fail(exc, NOT_FOUND)
        except ConnectionFailed as exc:
            _fail(exc, CONNECTION)
        except CalibrationError as exc:
            _fail(exc, PROBLEM)
        except ValueError as exc:  # a local check of the arguments or the file's arrays
            err.print(f"[bold red]error[/bold red]: {exc}", soft_wrap=True)
            raise typer.Exit(USAGE) from exc

    return run


# -- files -------------------------------------------------------------------------------------

LabelledFile = typer.Argument(metavar="FILE.npz", exists=True, dir_okay=False, readable=True, show_default=False,
                              help="logits (or probabilities, probs or scores) and labels.")
ArrayFile = typer.Argument(metavar="FILE", exists=True, dir_okay=False, readable=True, show_default=False,
                           help="An .npy array, or an .npz holding logits (or probabilities or scores).")


def _arrays(path: Path) -> dict[str, "np.ndarray"]:
    from ..codec import load_arrays

    try:
        arrays = load_arrays(path)
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(f"cannot read {path} as .npy or .npz: {exc}") from exc
    return {MEMBER_ALIASES.get(name, name): array for name, array in arrays.items()}


def _input_of(arrays: dict[str, "np.ndarray"], path: Path, input: str | None) -> str:
    from ..codec import INPUT_KINDS

    present = [kind for kind in INPUT_KINDS if kind in arrays]
    if input is not None:
        if input not in arrays:
            raise typer.BadParameter(f"{path} has no {input!r} array (it has {', '.join(arrays) or 'none'})")
        return input
    if len(present) != 1:
        raise typer.BadParameter(f"{path} must hold exactly one of {', '.join(INPUT_KINDS)} (it has "
                                 f"{', '.join(arrays) or 'none'}); or name one with --input")
    return present[0]


def _values(arrays: dict[str, "np.ndarray"], path: Path, input: str | None) -> tuple[str, "np.ndarray"]:
    """The input kind and array to send of a read FILE: an .npy's one array (``input``, default
    logits), or the .npz member ``_input_of`` names."""
    if "" in arrays:
        return input or "logits", arrays[""]
    kind = _input_of(arrays, path, input)
    return kind, arrays[kind]


def _labelled(path: Path, input: str | None) -> tuple[str, "np.ndarray", "np.ndarray"]:
    arrays = _arrays(path)
    if "" in arrays:
        raise typer.BadParameter(f"{path} is one .npy array; this command needs an .npz with "
                                 "logits (or probabilities or scores) and labels")
    if "labels" not in arrays:
        raise typer.BadParameter(f"{path} has no 'labels' array (it has {', '.join(arrays)})")
    kind = _input_of(arrays, path, input)
    return kind, arrays[kind], arrays["labels"]


def _json_option(text: str | None, what: str) -> dict | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"{what} must be a JSON object: {exc}") from exc
    if not isinstance(value, dict):
        raise typer.BadParameter(f"{what} must be a JSON object, not {type(value).__name__}")
    return value


def _print_json(value: Any) -> None:
    out.print_json(json.dumps(value, default=str))


InputOption = Annotated[str | None, typer.Option(
    help="Which array of the file to send: logits, probabilities or scores (default: the one it holds).",
    show_default=False)]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print the service's JSON answer (for scripts).")]
Name = Annotated[str, typer.Argument(metavar="NAME", help="Calibrator name.", show_default=False)]


# -- progress ----------------------------------------------------------------------------------


def _spinner(text: str) -> "Progress":
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    return Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err,
                    transient=True)


def _bar() -> "Progress":
    from rich.progress import BarColumn, Progress, SpinnerColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn

    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                    TimeElapsedColumn(), console=err, transient=True)


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


# -- commands ----------------------------------------------------------------------------------

METRIC_ROWS = ("nll", "brier", "ece", "adaptive_ece", "classwise_ece", "kde_ece", "mce", "accuracy",
               "mean_confidence")


def _show(title: str, table: Table) -> None:
    out.print(f"[bold]{title}[/bold]", soft_wrap=True)
    out.print(table)


def _before_after(report: dict) -> Table:
    table = Table()
    for column in ("metric", "before", "after", "change"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    before, after = report["before"]["metrics"], report["after"]["metrics"]
    for name in METRIC_ROWS:
        if name in before:
            change = after[name] - before[name] if None not in (before[name], after[name]) else None
            table.add_row(name, _fmt(before[name]), _fmt(after[name]),
                          "—" if change is None else f"{change:+.4f}")
    return table


def _parameters(parameters: dict) -> str:
    """A version's parameters on one line: numbers, short strings, and the shape of each list (numpy
    is loaded only for a list: `refit` of a temperature, say, needs none)."""
    shown = []
    for key, value in parameters.items():
        if isinstance(value, bool) or value is None:
            shown.append(f"{key}={value}")
        elif isinstance(value, int | float):
            shown.append(f"{key}={_fmt(float(value), 6)}")
        elif isinstance(value, str):
            if len(value) <= 40:
                shown.append(f"{key}={value}")
        elif isinstance(value, list):
            shown.append(f"{key}=[{_shape(value)}]")
        else:
            shown.append(f"{key}={{…}}")
    return ", ".join(shown) or "—"


def _shape(value: list) -> tuple[int, ...] | int:
    """A numeric nested list's shape, or (ragged or not numeric) its length."""
    import numpy as np

    try:
        return np.asarray(value, dtype=float).shape
    except (TypeError, ValueError):
        return len(value)


def examples(*lines: str) -> str:
    """A command's help epilog: ``Examples``, then each line (``$ command`` lines and notes) on
    its own (typer's rich help keeps a break only where the epilog has a blank line)."""
    return "\n\n".join(["[bold]Examples[/bold]", *(escape(line) for line in lines)])
