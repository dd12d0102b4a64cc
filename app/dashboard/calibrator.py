"""A calibrator's page (``/ui/calibrators/NAME/online``): its health, the quality over time as a
chart with a window selector (rows, hour, day) and the windows where alarms fired, the drift
monitors' e-values against their threshold, evaluations with their confidence sequences drawn,
alias moves with links to the evaluation given as evidence, and its jobs. Where a part is empty
it says the command (the ``calibration`` CLI) that fills it."""

from __future__ import annotations

from .charts import evaluation_chart, evalue_chart, quality_chart
from .home import badge
from .html import attr, crumbs, link, num_cell, page, table, text, url, when
from .online import _deliveries, _monitors, _observations, _quality
from .set_charts import coverage_chart, coverage_levels, set_size_chart

FIXED_WINDOWS = ("500", "2500", "hour", "day")


def next_step(*commands: str, why: str) -> str:
    """An empty state: what is missing and the command(s) that fill it."""
    shown = " then ".join(f"<code>{text(c)}</code>" for c in commands)
    return f'<p class="next">{text(why)} Run {shown}.</p>'


def window_selector(name: str, window: str, automatic: str) -> str:
    choices = list(dict.fromkeys((automatic, *FIXED_WINDOWS)))
    items = []
    for choice in choices:
        label = f"{choice} rows" if choice.isdigit() else f"per {choice}"
        items.append(f'<strong aria-current="true">{text(label)}</strong>' if choice == window else
                     f'<a href="{url("calibrators", name, "online", window=choice)}">{text(label)}</a>')
    return (f'<nav class="windows" aria-label="quality window">Window: {"".join(items)}</nav>'
            f'<form method="get" action="{url("calibrators", name, "online")}" class="windows">'
            f'<label for="window">rows per window</label> <input id="window" name="window" size="7" '
            f'value="{attr(window)}" inputmode="numeric"> <button type="submit">Show</button></form>')


def _evaluations(name: str, listing: list[dict]) -> str:
    rows = []
    for e in listing:
        part = e.get(e.get("decided_on", "nll"), {})
        low, high = part.get("confidence_sequence") or (None, None)
        ece = e.get("ece", {})
        rows.append(
            f'<tr id="evaluation-{attr(e["id"])}" data-evaluation="{attr(e["id"])}"><td><code>{text(e["id"][:12])}'
            f'</code><br>{when(e["created_at"])}</td>{num_cell(e["challenger"], 0)}<td class="num">'
            f'{text(e["champion"])}</td>{num_cell(e["n_rows"], 0)}<td>{text(e.get("decided_on", "nll"))}: '
            f'{_cs(part.get("difference"), low, high)}</td><td>{_ci(ece.get("challenger"))}</td>'
            f'<td>{_ci(ece.get("champion"))}</td>{num_cell(e["alpha"], 2)}<td>{text(e["verdict"])}</td></tr>')
    return table("Evaluations, newest first (challenger against champion on held-out rows)",
                 ["Evaluation", "Challenger", "Champion", "Rows", "Loss difference [confidence sequence]",
                  "ECE challenger", "ECE champion", "Alpha", "Verdict"], rows, {1, 2, 3, 7}, "evaluations")


def _cs(mean, low, high) -> str:
    if mean is None:
        return "—"
    bounds = "—" if low is None or high is None else f"{low:.4f}, {high:.4f}"
    return f"{mean:.4f} [{bounds}]"


def _ci(metric: dict | None) -> str:
    if not metric or metric.get("estimate") is None:
        return "—"
    spread = f' [{metric["low"]:.4f}, {metric["high"]:.4f}]' if metric.get("low") is not None else ""
    return f"{metric['estimate']:.4f}{spread}"


def _history(history: dict, known: set[str]) -> str:
    rows = []
    for m in history["moves"]:
        evidence = m["evaluation"] or ""
        shown = (f'<a href="#evaluation-{attr(evidence)}">{text(evidence[:12])}</a>' if evidence in known else
                 f"<code>{text(evidence[:12])}</code>") if evidence else ""
        rows.append(f'<tr><td>{when(m["moved_at"])}</td><td>{text(m["action"])}</td>{num_cell(m["from_version"], 0)}'
                    f'{num_cell(m["to_version"], 0)}<td>{text(m["actor"] or "")}</td><td>{shown}</td></tr>')
    gate = " (moves need an evaluation's evidence)" if history.get("require_evaluation") else ""
    return table(f"Alias {history['alias']} → v{history['version']}{gate}: moves, newest first",
                 ["When", "Action", "From", "To", "Who", "Evidence"], rows, {2, 3}, f"alias-{history['alias']}")


def _jobs(jobs: list[dict]) -> str:
    rows = [f'<tr data-job="{attr(j["id"])}"><td><code>{link(url("jobs", j["id"]), j["id"])}</code></td>'
            f'<td>{text(j["kind"])}</td><td class="status-{attr(j["status"])}">{text(j["status"])}</td>'
            f'<td>{when(j["created_at"])}</td></tr>' for j in jobs]
    return table("Jobs of this calibrator, newest first", ["Job", "Kind", "Status", "Created"], rows,
                 table_id="calibrator-jobs")


def online_page(name: str, facts: dict, signed_in: bool = False) -> str:
    """``facts``: ``summary``, ``quality``, ``alarms``, ``state``/``detail`` (``reads.state_of``),
    ``histories``, ``evaluations`` (whole), ``deliveries``, ``trajectories``, ``markers``,
    ``jobs`` and ``automatic`` (the default window of rows)."""
    quality, alarms, summary = facts["quality"], facts["alarms"], facts["summary"]
    label_it = next_step(f"calibration logging {name} 1", f"calibration calibrate {name} batch.npy --out served.csv",
                         f"calibration label {name} labels.csv",
                         why="No labelled observations yet: log served predictions and label them.") \
        + next_step(f"calibration observe {name} labelled.npz", why="Or upload a labelled batch (logits and labels):")
    body = crumbs(("/ui", "Calibrators"), (url("calibrators", name), name), (None, "Online"))
    body += f'<p id="health">Health: {badge(facts["state"], facts["detail"])}</p>'
    body += "<h2>Calibration over time</h2>" + window_selector(name, quality["window"], facts["automatic"])
    if quality["windows"]:
        title = f"{name}: ECE per {quality['window']} window, calibrated and uncalibrated"
        body += (f'<figure>{quality_chart(quality["windows"], facts["markers"], title)}<figcaption>ECE of each '
                 f"window through the version that served it (calibrated) and of the raw scores, with "
                 f"{quality['confidence']:.0%} bootstrap intervals; a red band marks the window in which a drift "
                 "alarm fired.</figcaption></figure>" + _quality(quality))
    else:
        body += label_it
    if coverage_levels(quality["windows"]):
        body += ("<h2>Prediction sets</h2>"
                 f'<figure>{coverage_chart(quality["windows"], f"{name}: coverage of the prediction sets per window")}'
                 "<figcaption>The fraction of labelled rows whose set held the label, per window and coverage level, "
                 f"with its {quality['confidence']:.0%} Wilson interval; dashed: the target coverage. A window wholly "
                 "below its target shows rows no longer like the set predictor's held-out rows.</figcaption></figure>"
                 f'<figure>{set_size_chart(quality["windows"], f"{name}: set sizes")}<figcaption>How many labelled '
                 "rows had sets of each size, per coverage level, over these windows.</figcaption></figure>")
    body += "<h2>Drift alarms</h2>"
    drawn = [t for t in facts["trajectories"] if t["rows"]]
    if drawn:
        body += (f'<figure>{evalue_chart(drawn, f"{name}: e-values of the labelled drift monitors")}<figcaption>'
                 "The e-value after every labelled row of each version on a log scale, against 1/alpha (dashed): "
                 "under no drift it reaches 1/alpha with probability at most alpha, ever.</figcaption></figure>")
    skipped = [t["version"] for t in facts["trajectories"] if t["skipped"]]
    if skipped:
        body += (f'<p class="muted">Not drawn (more rows than CALIBRATION_UI_TRAJECTORY_ROWS): versions '
                 f'{", ".join(map(str, skipped))}.</p>')
    body += (_monitors(alarms) if alarms["monitors"] else
             next_step(f"calibration alarms {name} --evaluate", why="No drift monitor has been evaluated yet."))
    if facts["deliveries"] and facts["deliveries"]["deliveries"]:
        body += _deliveries(facts["deliveries"])
    body += "<h2>Evaluations</h2>"
    if facts["evaluations"]:
        body += (f'<figure>{evaluation_chart(facts["evaluations"], f"{name}: evaluations")}<figcaption>Mean loss '
                 "difference, challenger minus champion, with its anytime-valid confidence sequence: wholly left of "
                 "0, the challenger is better at level alpha.</figcaption></figure>"
                 + _evaluations(name, facts["evaluations"]))
    else:
        body += next_step(f"calibration refit {name}", f"calibration evaluate {name} 2 production",
                          why="No evaluation yet: fit a challenger on the labelled rows and compare it with the "
                              "serving version on rows neither saw.")
    body += "<h2>Observations</h2>" + _observations(summary)
    known = {e["id"] for e in facts["evaluations"]}
    body += "<h2>Alias history</h2>" + ("".join(_history(h, known) for h in facts["histories"]) or
                                        next_step(f"calibration alias {name} production 1",
                                                  why="No alias: callers serve the latest version."))
    body += "<h2>Jobs</h2>" + (_jobs(facts["jobs"]) if facts["jobs"] else
                               next_step(f"calibration policy set {name} --every-labels 5000 --on-alarm",
                                         why="No job yet: a refit policy runs refits as jobs."))
    body += f'<p>{link(url("calibrators", name), "Versions")} · {link(url("jobs", calibrator=name), "All jobs")}</p>'
    return page(f"Calibrator {name}: online", body, signed_in=signed_in)
