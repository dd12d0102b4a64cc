"""The tables of a calibrator's page (``app.dashboard.calibrator``): its observations (and whether
its prediction log is full, ``CALIBRATION_MAX_LOGGED_ROWS``), calibration quality per window (ECE
calibrated and not, with intervals), drift monitors (e-values as ``html.evalue`` writes them) and
their webhook deliveries, from the dicts the service returns (the API's JSON, before encoding)."""

from __future__ import annotations

from .html import evalue, num_cell, table, text, when


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
            f'{m["version"]}</th><td>{text(m["signal"])}</td>{num_cell(m["n_rows"], 0)}'
            f'<td class="num evalue" data-value="{m["e_value"]!r}">{evalue(m["e_value"])}</td>'
            f'<td class="num">{evalue(1 / m["alpha"])}</td><td>{_alarm(m)}</td>'
            f'<td>{when(m["alarmed_at"]) if m["alarm"] else ""}</td></tr>' for m in alarms["monitors"]]
    return table("Drift monitors (an alarm when the e-value reaches 1/alpha)",
                 ["Version", "Signal", "Rows", "E-value", "Threshold", "Alarm", "Raised"], rows, {0, 2, 3, 4},
                 "monitors")


def _alarm(monitor: dict) -> str:
    if not monitor["alarm"]:
        return "no"
    return f'<span class="badge badge-alarmed">alarm</span> at row {monitor["alarm_rows"]}'


def _deliveries(listing: dict) -> str:
    rows = [f'<tr data-delivery="{text(d["id"])}" data-state="{text(d["state"])}"><td>{when(d["created_at"])}</td>'
            f'{num_cell(d["version"], 0)}<td>{text(d["signal"])}</td><td>{text(d["state"])}</td>'
            f'{num_cell(d["attempts"], 0)}<td>{text(d["last_error"] or "")}</td><td><code>{text(d["id"])}</code></td>'
            '</tr>' for d in listing["deliveries"]]
    return table("Webhook deliveries of the alarms, newest first", ["Raised", "Version", "Signal", "State",
                 "Attempts", "Last error", "Webhook-Id"], rows, {1, 4}, "deliveries")
