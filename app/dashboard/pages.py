"""The dashboard's pages, from the dicts the service returns (the API's JSON, before encoding)."""

from __future__ import annotations

from ..jobs.status import ACTIVE
from .html import aliases, crumbs, link, num_cell, number, page, table, text, url, when
from .svg import reliability_svg, series_intervals

METRICS = ("ece", "mce", "adaptive_ece", "classwise_ece", "kde_ece", "brier", "nll", "accuracy",
           "mean_confidence", "expectation_consistency_gap")
JOBS_REFRESH_SECONDS = 3  # the jobs page reloads itself while a job is queued or running
REFRESH_NOTE = f" This page reloads every {JOBS_REFRESH_SECONDS} s while a job is queued or running."
JOB_COLUMNS = ["Job", "Kind", "Calibrator", "Status", "Progress", "Step", "Created", "Finished", "Result"]


def _more(listing: dict, href) -> str:
    token = listing.get("next_page_token")
    return f'<p><a rel="next" href="{href(token)}">Next page</a></p>' if token else ""


def _ece_pair(report: dict | None) -> tuple[float | None, float | None]:
    if not report:
        return None, None
    return report.get("before", {}).get("metrics", {}).get("ece"), report.get("after", {}).get("metrics", {}).get("ece")


def versions_page(calibrator: dict, listing: dict, signed_in: bool = False) -> str:
    name = calibrator["name"]
    rows = []
    for v in listing["versions"]:
        before, after = _ece_pair(v["report"])
        rows.append(
            f'<tr data-version="{v["version"]}"><th scope="row" class="num">'
            f'{link(url("calibrators", name, "versions", v["version"]), v["version"])}</th>'
            f'<td>{text(v["method"])}</td>{num_cell(v["n_samples"])}{num_cell(v["n_classes"])}'
            f"{num_cell(before)}{num_cell(after)}<td>{aliases(v['aliases'])}</td>"
            f'<td>{text(v["description"])}</td><td>{when(v["created_at"])}</td></tr>')
    for d in listing.get("damaged", []):
        rows.append(f'<tr data-damaged="{d["version"]}"><th scope="row" class="num">{d["version"]}</th>'
                    f'<td colspan="8" class="status-failed">damaged: {text(d["detail"])}</td></tr>')
    rows.sort(key=lambda row: -int(row.split('"', 2)[1]))  # newest first, the damaged among them
    summary = (f'<p>{calibrator["n_versions"]} version(s); latest {text(calibrator["latest_version"])}. '
               f'Serve <code>{text(name)}</code> (latest), <code>{text(name)}@alias</code> or a pinned version. '
               f'{link(url("jobs", calibrator=name), "Jobs of this calibrator")}; '
               f'{link(url("calibrators", name, "online"), "its online loop")} (observations, quality over time, '
               'alarms, alias history).</p>')
    body = (crumbs(("/ui", "Calibrators"), (None, name)) + summary
            + table("Versions, newest first (ECE on the fitting data)",
                    ["Version", "Method", "Samples", "Classes", "ECE before", "ECE after", "Aliases",
                     "Description", "Created"], rows, {0, 2, 3, 4, 5}, "versions")
            + _more(listing, lambda token: url("calibrators", name, page_token=token)))
    return page(f"Calibrator {name}", body, signed_in=signed_in)


def _metrics_table(report: dict) -> str:
    rows = [f'<tr data-metric="{m}"><th scope="row">{m}</th>{num_cell(report["before"]["metrics"].get(m))}'
            f'{num_cell(report["after"]["metrics"].get(m))}</tr>' for m in METRICS
            if m in report["before"]["metrics"]]
    rows.append(f'<tr data-metric="calibration_gain"><th scope="row">calibration_gain</th><td></td>'
                f'{num_cell(report.get("calibration_gain"))}</tr>')
    return table(f"Metrics on the {report['n_samples']} fitting samples ({report['n_bins']} bins)",
                 ["Metric", "Before", "After"], rows, {1, 2}, "metrics")


def _comparison_table(comparison: dict) -> str:
    selection = comparison.get("selection") or {}
    chosen = (selection.get("chosen") or {}).get("name")
    rows = []
    for m in comparison.get("methods", []):
        mean = m.get("mean", {})
        rows.append(f'<tr data-candidate="{text(m["name"])}"><th scope="row">{text(m["name"])}'
                    f'{" (chosen)" if m["name"] == chosen else ""}</th><td>{text(m["method"])}</td>'
                    f'{num_cell(mean.get("nll"))}{num_cell(mean.get("brier"))}{num_cell(mean.get("ece"))}'
                    f'<td>{text(m.get("error") or "")}</td></tr>')
    reason = selection.get("reason")
    return ("<h2>Method comparison</h2>"
            + table(f"Candidates, {comparison.get('folds')}-fold cross-validated means",
                    ["Candidate", "Method", "NLL", "Brier", "ECE", "Error"], rows, {2, 3, 4}, "comparison")
            + (f"<p>{text(reason)}</p>" if reason else ""))


def version_page(version: dict, signed_in: bool = False) -> str:
    name, number_ = version["name"], version["version"]
    report = version.get("report") or {}
    facts = [("Method", text(version["method"])), ("Input", text(version["input"])),
             ("Samples", text(version["n_samples"])), ("Classes", text(version["n_classes"])),
             ("Aliases", aliases(version["aliases"])), ("Description", text(version["description"])),
             ("Created", when(version["created_at"])), ("Checksum", f'<code>{text(version["checksum"])}</code>')]
    rows = [f"<tr><th scope=\"row\">{label}</th><td>{value}</td></tr>" for label, value in facts]
    body = crumbs(("/ui", "Calibrators"), (url("calibrators", name), name), (None, f"version {number_}"))
    body += table("Version", ["Field", "Value"], rows, table_id="facts")
    if version.get("parameters"):
        params = [f"<tr><th scope=\"row\">{text(k)}</th><td>{text(_short(v))}</td></tr>"
                  for k, v in version["parameters"].items()]
        body += table("Fitted parameters (summary)", ["Parameter", "Value"], params, table_id="parameters")
    if "before" in report and "after" in report:
        title = f"Reliability diagram of {name} version {number_}"
        intervals = series_intervals(report, ("before", "after"))
        source = ("the stored bootstrap" if report["before"].get("intervals") else
                  f"an approximate bootstrap from the stored bins ({intervals['after'].n_resamples} resamples)")
        body += ("<h2>Metrics</h2>" + _metrics_table(report) + "<h2>Reliability diagram</h2>"
                 f'<figure>{reliability_svg(report, title)}<figcaption>Before and after calibration on the '
                 f"fitting data. Error bars: 95% Wilson intervals; ECE intervals from {text(source)}."
                 "</figcaption></figure>")
    else:
        body += '<p class="muted">This version has no stored validation report.</p>'
    if report.get("comparison"):
        body += _comparison_table(report["comparison"])
    return page(f"{name} version {number_}", body, signed_in=signed_in)


def _short(value, limit: int = 120) -> str:
    shown = value if isinstance(value, str) else (number(value) if isinstance(value, float) else str(value))
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _result(job: dict) -> str:
    result = job.get("result") or {}
    if job["kind"] == "fit" and "version" in result and "name" in result:
        return link(url("calibrators", result["name"], "versions", result["version"]),
                    f"{result['name']} v{result['version']}")
    if job.get("error"):
        return text(job["error"].get("detail") or job["error"].get("title"))
    return ""


def jobs_page(jobs: list[dict], calibrator: str | None, status: str | None, signed_in: bool = False) -> str:
    active = any(j["status"] in ACTIVE for j in jobs)
    rows = []
    for j in jobs:
        percent = j.get("percent") or 0.0
        rows.append(
            f'<tr data-job="{text(j["id"])}"><th scope="row"><code>{link(url("jobs", j["id"]), j["id"])}</code></th>'
            f'<td>{text(j["kind"])}</td>'
            f'<td>{_calibrator_link(j["calibrator"])}</td>'
            f'<td class="status-{text(j["status"])}">{text(j["status"])}</td>'
            f'<td class="num" data-value="{percent!r}">{_progress(percent)}</td>'
            f'<td>{text(j.get("step"))}</td><td>{when(j["created_at"])}</td><td>{when(j.get("finished_at"))}</td>'
            f"<td>{_result(j)}</td></tr>")
    shown = " of " + ", ".join(f"{k} {text(v)}" for k, v in (("calibrator", calibrator), ("status", status)) if v)
    body = (table(f"Jobs{shown if calibrator or status else ''}, newest first", JOB_COLUMNS, rows, {4}, "jobs")
            + f'<p class="muted">Finished jobs are kept for a limited time.{REFRESH_NOTE if active else ""}</p>')
    return page("Jobs", body, signed_in=signed_in, refresh=JOBS_REFRESH_SECONDS if active else None)


def _calibrator_link(name: str | None) -> str:
    return link(url("calibrators", name), name) if name else ""


def _progress(percent: float) -> str:
    return (f'<progress max="100" value="{percent:.1f}" aria-label="{percent:.0f}% done"></progress> '
            f"{percent:.0f}%")


def job_page(job: dict, signed_in: bool = False) -> str:
    """One job: its state and progress, its error, and its result (the fitted version's link, or
    a comparison's table)."""
    percent = job.get("percent") or 0.0
    facts = [("Kind", text(job["kind"])),
             ("Calibrator", _calibrator_link(job["calibrator"])),
             ("Status", f'<span class="status-{text(job["status"])}">{text(job["status"])}</span>'),
             ("Progress", _progress(percent)), ("Step", text(job.get("step"))),
             ("Created", when(job.get("created_at"))), ("Started", when(job.get("started_at"))),
             ("Finished", when(job.get("finished_at"))), ("Worker", text(job.get("worker")))]
    if job.get("error"):
        facts.append(("Error", text(f'{job["error"].get("title", "")}: {job["error"].get("detail", "")}')))
    if _result(job) and job["kind"] == "fit":
        facts.append(("Result", _result(job)))
    rows = [f'<tr data-field="{label.lower()}"><th scope="row">{label}</th><td>{value}</td></tr>'
            for label, value in facts]
    body = (crumbs(("/ui/jobs", "Jobs"), (None, job["id"])) + table("Job", ["Field", "Value"], rows, table_id="job"))
    result = job.get("result") or {}
    if job["kind"] == "compare" and result.get("methods"):
        body += _comparison_table(result)
    active = job["status"] in ACTIVE
    return page(f"Job {job['id']}", body, signed_in=signed_in, refresh=JOBS_REFRESH_SECONDS if active else None)


def login_page(message: str | None = None, status_note: str | None = None) -> str:
    note = f'<p role="alert">{text(message)}</p>' if message else ""
    body = (f"{note}<p>{text(status_note or 'API keys are required: sign in with a key that has the read scope.')}"
            '</p><form class="login" method="post" action="/ui/login"><p><label for="api_key">API key</label><br>'
            '<input id="api_key" name="api_key" type="password" autocomplete="current-password" required></p>'
            '<p><button type="submit">Sign in</button></p></form>'
            '<p class="muted">The key is kept in an HttpOnly, SameSite=Strict cookie limited to /ui.</p>')
    return page("Sign in", body)


def error_page(status: int, title: str, detail: str, signed_in: bool = False) -> str:
    return page(f"{status} {title}", f"<p>{text(detail)}</p><p>{link('/ui', 'Back to the calibrators')}</p>",
                signed_in=signed_in)
