"""The dashboard's home: one row per calibrator that answers "is everything all right?" — the
aliases that serve it, a coloured health badge (a drift alarm and the monitor that fired it, no
labels yet, or fine), the newest calibrated ECE with a sparkline over recent windows of rows, how
fresh its labels are (the newest labelled observation, the share of logged predictions
labelled) and its prediction log (sampling rate, rows dropped while full)."""

from __future__ import annotations

from .charts import sparkline
from .html import link, num_cell, number, page, table, text, url, when

COLUMNS = ["Calibrator", "Serving", "Health", "ECE (newest window)", "Last label", "Labelled", "Logging", "Dropped"]
FIRST_FIT = "calibration fit NAME val.npz --method temperature"


def badge(state: str, detail: str) -> str:
    css = state.replace(" ", "-")
    return (f'<span class="badge badge-{css}" data-state="{text(state)}" title="{text(detail)}">{text(state)}</span>'
            f' <span class="muted">{text(detail)}</span>')


def _serving(calibrator: dict) -> str:
    moved = [f'<span class="alias">{text(a)} → v{v}</span>' for a, v in calibrator["aliases"].items()]
    latest = calibrator["latest_version"]
    return " ".join(moved + ([f'<span class="muted">latest v{latest}</span>'] if latest else []))


def _ece(newest: float | None, spark: list, window: str) -> str:
    if newest is None:
        return '<span class="muted">—</span>'
    return f'{number(newest)} {sparkline(spark)}<br><span class="muted">per {window} rows</span>'


def _row(facts: dict) -> str:
    c, summary, log = facts["calibrator"], facts["summary"], facts["summary"]["prediction_log"]
    name = c["name"]
    spark = facts["sparkline"]
    newest = next((v for _, v in reversed(spark) if v is not None), None)
    share = (f'{log["labelled"] / log["logged"]:.0%} of {log["logged"]} logged' if log["logged"] else
             f'{summary["total_rows"]} uploaded' if summary["total_rows"] else "—")
    exact = "" if newest is None else f' data-value="{newest!r}"'
    rate = f'{log["sample_rate"]:.0%}' if log["sample_rate"] else '<span class="muted">off</span>'
    return (f'<tr data-name="{text(name)}" data-state="{text(facts["state"])}">'
            f'<th scope="row">{link(url("calibrators", name, "online"), name)}<br><span class="muted">'
            f'{link(url("calibrators", name), str(c["n_versions"]) + " version(s)")}</span></th>'
            f"<td>{_serving(c)}</td><td>{badge(facts['state'], facts['detail'])}</td>"
            f'<td class="ece"{exact}>{_ece(newest, spark, facts["window"])}</td>'
            f'<td>{when(summary["last_at"]) or "—"}</td><td data-logged="{log["logged"]}" '
            f'data-labelled="{log["labelled"]}">{share}</td><td>{rate}</td>{num_cell(log["dropped"], 0)}</tr>')


def home_page(listing: dict, healths: list[dict], signed_in: bool = False) -> str:
    """``healths``: ``reads.health`` of each calibrator of ``listing`` (one page of them)."""
    token = listing.get("next_page_token")
    more = f'<p><a rel="next" href="{url(page_token=token)}">Next page</a></p>' if token else ""
    if not healths:
        body = ('<p class="next">No calibrator yet. Fit one on validation logits (an .npz with '
                f'<code>logits</code> and <code>labels</code>): <code>{text(FIRST_FIT)}</code></p>')
        return page("Calibrators", body, signed_in=signed_in)
    alarmed = sum(h["state"] == "alarmed" for h in healths)
    verdict = (f'<p id="verdict" class="badge badge-alarmed">{alarmed} of {len(healths)} calibrator(s) alarmed</p>'
               if alarmed else f'<p id="verdict" class="badge badge-ok">No alarm on {len(healths)} calibrator(s)</p>')
    body = (verdict + table("Calibrators, by name: health at a glance", COLUMNS, [_row(h) for h in healths],
                            {7}, "calibrators") + more
            + '<p class="muted">Health: <b>alarmed</b> when a drift monitor\'s e-value reached 1/alpha (the '
              "monitor named: labelled rows or label-free, and the version); <b>ok</b> when every monitor is "
              "below; <b>unchecked</b> with labels but no evaluated monitor; <b>no labels</b> without labelled "
              "rows. ECE: the calibrated ECE of the newest window of rows.</p>")
    return page("Calibrators", body, signed_in=signed_in)
