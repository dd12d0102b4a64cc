"""``calibration policy show | set | run``: a calibrator's refit policy (when to refit on its
labelled observations, and where the refitted version goes)."""

from typing import Annotated

import typer

from .base import JsonFlag, Name, _json_option, _print_json, _spinner, app, examples, handled, out

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
    from ..models import Job

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
