"""The dashboard's page of a calibrator's online loop: its observations (and whether its
prediction log is full, ``CALIBRATION_MAX_LOGGED_ROWS``), calibration quality per
window (ECE calibrated and not, with intervals), drift monitors and alarms with their webhook
deliveries, challenger evaluations, and the history of every alias, from the dicts the service
returns (the API's JSON, before encoding)."""

from __future__ import annotations

from .html import crumbs, link, num_cell, page, table, text, url, when


def _interval(metric: dict | None) -> str:
    if not metric or metric.get("estimate") is None:
        return '<td class="num">—</td>'
    low, high = metric.get("low"), metric.get("high")
    spread = f' <span class="muted">[{low:.4f}, {high:.4f}]</span>' if low is not None and high is not None else ""
    return f'<td class="num" data-value="{metric["estimate"]!r}">{metric["estimate"]:.4f}{spread}</td>'


def _observations(summary: dict) -> str:
    log = summary["prediction_log"]
    head = (f'<p>{summary["total_rows"]} labelled rows of {text(summary["input_kind"] or "—")} '
            f'({text(summary["n_classes"] or "—")} classes); the prediction log keeps '
            f'{log["sample_rate"]:.0%} of the served rows: {log["logged"]} logged, {log["labelled"]} labelled.</p>')
    if log.get("full"):
        head += (f'<p class="warning" id="log-full">The prediction log is full ({log["logged_rows"]} rows, the cap '
                 '<code>CALIBRATION_MAX_LOGGED_ROWS</code>): calibrate still answers, but its rows are not logged '
                 f'until retention or a delete frees room; {log["dropped"]} rows not logged so far.</p>')
    elif log.get("dropped"):
        head += (f'<p id="log-dropped">{log["dropped"]} served rows were not logged while the prediction log was '
                 'full (<code>CALIBRATION_MAX_LOGGED_ROWS</code>); it logs again.</p>')
    rows = [f'<tr><th scope="row">{text(kind)}</th><td>{text(key)}</td>{num_cell(count, 0)}</tr>'
            for kind, counts in (("source", summary["by_source"]), ("serving version", summary["by_version"]),
                                 ("day", summary["by_day"])) for key, count in counts.items()]
    return head + table("Observations by source, serving version and day", ["By", "Value", "Rows"], rows, {2},
                        "observations")


def _quality(quality: dict) -> str:
    rows = []
    for window in quality["windows"]:
        calibrated, raw = window["calibrated"], window["uncalibrated"]
        rows.append(f'<tr data-window="{text(window["window"])}"><th scope="row">{text(window["window"])}</th>'
                    f'{num_cell(window["n_rows"], 0)}{_interval(calibrated.get("ece"))}{_interval(raw.get("ece"))}'
                    f'{_interval(calibrated.get("nll"))}{_interval(calibrated.get("accuracy"))}'
                    f'{num_cell(window["label_free"]["expected_accuracy"])}</tr>')
    caption = (f"Quality per {text(quality['window'])} window, newest last ({quality['bootstrap']} bootstrap "
               f"resamples, {quality['confidence']:.0%} intervals)")
    return table(caption, ["Window", "Rows", "ECE", "ECE uncalibrated", "NLL", "Accuracy", "Expected accuracy"],
                 rows, {1, 2, 3, 4, 5, 6}, "quality")


def _monitors(alarms: dict) -> str:
    rows = [f'<tr data-version="{m["version"]}" data-signal="{text(m["signal"])}"><th scope="row" class="num">'
            f'{m["version"]}</th><td>{text(m["signal"])}</td>{num_cell(m["n_rows"], 0)}{num_cell(m["e_value"])}'
            f'{num_cell(1 / m["alpha"], 0)}<td>{"alarm at row " + str(m["alarm_rows"]) if m["alarm"] else "no"}'
            f'</td><td>{when(m["alarmed_at"]) if m["alarm"] else ""}</td></tr>' for m in alarms["monitors"]]
    return table("Drift monitors (an alarm when the e-value reaches 1/alpha)",
                 ["Version", "Signal", "Rows", "E-value", "Threshold", "Alarm", "Raised"], rows, {0, 2, 3, 4},
                 "monitors")


def _deliveries(listing: dict) -> str:
    rows = [f'<tr data-delivery="{text(d["id"])}" data-state="{text(d["state"])}"><td>{when(d["created_at"])}</td>'
            f'{num_cell(d["version"], 0)}<td>{text(d["signal"])}</td><td>{text(d["state"])}</td>'
            f'{num_cell(d["attempts"], 0)}<td>{text(d["last_error"] or "")}</td><td><code>{text(d["id"])}</code></td>'
            '</tr>' for d in listing["deliveries"]]
    return table("Webhook deliveries of the alarms, newest first", ["Raised", "Version", "Signal", "State",
                 "Attempts", "Last error", "Webhook-Id"], rows, {1, 4}, "deliveries")


def _evaluations(listing: dict) -> str:
    rows = [f'<tr data-evaluation="{text(e["id"])}"><td>{when(e["created_at"])}</td>{num_cell(e["challenger"], 0)}'
            f'{num_cell(e["champion"], 0)}{num_cell(e["n_rows"], 0)}{num_cell(e["alpha"], 2)}'
            f'<td>{text(e["verdict"])}</td></tr>' for e in listing["evaluations"]]
    return table("Evaluations, newest first (challenger against champion on held-out rows)",
                 ["When", "Challenger", "Champion", "Rows", "Alpha", "Verdict"], rows, {1, 2, 3, 4}, "evaluations")


def _history(history: dict) -> str:
    rows = [f'<tr><td>{when(m["moved_at"])}</td><td>{text(m["action"])}</td>{num_cell(m["from_version"], 0)}'
            f'{num_cell(m["to_version"], 0)}<td>{text(m["actor"] or "")}</td>'
            f'<td>{text(m["evaluation"] or "")}</td></tr>' for m in history["moves"]]
    gate = " (moves need an evaluation's evidence)" if history.get("require_evaluation") else ""
    return table(f"Alias {history['alias']} → v{history['version']}{gate}: moves, newest first",
                 ["When", "Action", "From", "To", "Who", "Evidence"], rows, {2, 3}, f"alias-{history['alias']}")


def online_page(name: str, summary: dict, quality: dict, alarms: dict, histories: list[dict], evaluations: dict,
                signed_in: bool = False, deliveries: dict | None = None) -> str:
    body = (crumbs(("/ui", "Calibrators"), (url("calibrators", name), name), (None, "Online"))
            + "<h2>Observations</h2>" + _observations(summary)
            + "<h2>Calibration over time</h2>" + (_quality(quality) if quality["windows"] else
                                                  "<p>No labelled observations yet.</p>")
            + "<h2>Drift alarms</h2>" + (_monitors(alarms) if alarms["monitors"] else
                                         "<p>No monitor has been evaluated yet.</p>")
            + (_deliveries(deliveries) if deliveries and deliveries["deliveries"] else "")
            + "<h2>Evaluations</h2>" + (_evaluations(evaluations) if evaluations["evaluations"] else
                                        "<p>No evaluation yet.</p>")
            + "<h2>Alias history</h2>" + ("".join(_history(h) for h in histories) or "<p>No aliases.</p>")
            + f'<p>{link(url("calibrators", name), "Versions")} · {link(url("jobs", calibrator=name), "Jobs")}</p>')
    return page(f"Calibrator {name}: online", body, signed_in=signed_in)
