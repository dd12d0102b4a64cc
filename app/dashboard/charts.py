"""The online loop's charts as inline SVG (no script, nothing fetched): a sparkline of the ECE per
window, the quality over time (ECE calibrated and not, each with its bootstrap interval, and a
marker on the window where an alarm fired), the drift monitors' e-values against ``1/alpha`` on a
log scale, and evaluations' confidence sequences on the loss difference. Every point carries its
numbers in ``data-*`` attributes and a ``<title>``."""

from __future__ import annotations

import math

from .html import attr, evalue, text

CALIBRATED, RAW, ALARM, GREY = "#0b5cad", "#c2410c", "#b42318", "#6b7280"
LINES = ("#0b5cad", "#7c3aed", "#0f766e", "#c2410c", "#be185d")


def _svg(width: int, height: int, title: str, body: list[str], css: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
            f'height="{height}" role="img" class="chart {css}" font-family="system-ui, sans-serif" font-size="12" '
            f'fill="#1b1f24"><title>{text(title)}</title>' + "".join(body) + "</svg>")


def sparkline(points: list[tuple[str, float | None]], width: int = 120, height: int = 28) -> str:
    """The calibrated ECE per window, oldest first, scaled to its own range from 0."""
    values = [v for _, v in points if v is not None]
    if not values:
        return '<span class="muted">—</span>'
    top = max(max(values), 1e-9)
    step = (width - 4) / max(len(points) - 1, 1)
    xy = [(2 + i * step, height - 2 - (height - 4) * v / top) for i, (_, v) in enumerate(points) if v is not None]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    last_x, last_y = xy[-1]
    shown = "; ".join(f"{w}: {v:.4f}" for w, v in points if v is not None)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="sparkline" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}" role="img" data-points="{len(xy)}">'
            f"<title>ECE per window: {text(shown)}</title>"
            f'<polyline points="{line}" fill="none" stroke="{CALIBRATED}" stroke-width="1.5"/>'
            f'<circle cx="{last_x:.1f}" cy="{last_y:.1f}" r="2.5" fill="{CALIBRATED}"/></svg>')


def quality_chart(windows: list[dict], markers: list[dict], title: str) -> str:
    """ECE per window, calibrated and uncalibrated, with intervals; a red band and label on each
    window where an alarm fired."""
    width, height, left, right, top, bottom = 860, 300, 64, 150, 16, 70
    plot_w, plot_h = width - left - right, height - top - bottom
    highs = [m.get("high") or m.get("estimate") or 0 for w in windows for m in (w["calibrated"]["ece"],
                                                                               w["uncalibrated"]["ece"])]
    y_top = max(max(highs, default=0) * 1.1, 0.01)
    slot = plot_w / max(len(windows), 1)

    def x(i: int) -> float:
        return left + slot * (i + 0.5)

    def y(v: float) -> float:
        return top + plot_h * (1 - v / y_top)

    body = [f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fff" stroke="#9aa3ad"/>']
    index = {w["window"]: i for i, w in enumerate(windows)}
    for marker in markers:
        if marker["window"] in index:
            i = index[marker["window"]]
            body.append(f'<g class="alarm-marker" data-window="{attr(marker["window"])}" '
                        f'data-version="{marker["version"]}" data-signal="{attr(marker["signal"])}">'
                        f'<title>alarm: {text(marker["signal"])} monitor of v{marker["version"]}</title>'
                        f'<rect x="{x(i) - slot / 2:.1f}" y="{top}" width="{slot:.1f}" height="{plot_h}" '
                        f'fill="{ALARM}" fill-opacity="0.12"/><text x="{x(i):.1f}" y="{top + 12}" '
                        f'text-anchor="middle" fill="{ALARM}" font-size="11">▲ alarm v{marker["version"]}</text></g>')
    for i in range(5):
        v = y_top * i / 4
        body.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{left + plot_w}" y2="{y(v):.1f}" stroke="#eef1f4"/>'
                    f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.3f}</text>')
    body.append(f'<text transform="translate(14 {top + plot_h / 2}) rotate(-90)" text-anchor="middle">ECE</text>')
    every = max(1, math.ceil(len(windows) / 12))
    for i, w in enumerate(windows):
        if i % every == 0:
            body.append(f'<text x="{x(i):.1f}" y="{top + plot_h + 14}" text-anchor="end" font-size="10" '
                        f'transform="rotate(-30 {x(i):.1f} {top + plot_h + 14})">{text(w["window"])}</text>')
    for series, colour, offset in (("calibrated", CALIBRATED, -0.12), ("uncalibrated", RAW, 0.12)):
        points = []
        body.append(f'<g class="series" data-series="{series}">')
        for i, w in enumerate(windows):
            m = w[series]["ece"]
            if m.get("estimate") is None:
                continue
            cx = x(i) + offset * slot * 0.5
            points.append(f"{cx:.1f},{y(m['estimate']):.1f}")
            bar = (f'<line x1="{cx:.1f}" y1="{y(m["low"]):.1f}" x2="{cx:.1f}" y2="{y(m["high"]):.1f}" '
                   f'stroke="{colour}"/>') if m.get("low") is not None and m.get("high") is not None else ""
            body.append(f'<g class="point" data-window="{attr(w["window"])}" data-ece="{m["estimate"]!r}">'
                        f'<title>{text(w["window"])}: {series} ECE {m["estimate"]:.4f} ({w["n_rows"]} rows)</title>'
                        f'{bar}<circle cx="{cx:.1f}" cy="{y(m["estimate"]):.1f}" r="3.5" fill="{colour}"/></g>')
        body.append(f'<polyline points="{" ".join(points)}" fill="none" stroke="{colour}" stroke-opacity="0.6"/></g>')
    for i, (label, colour) in enumerate((("calibrated", CALIBRATED), ("uncalibrated", RAW))):
        ly = top + 14 + 18 * i
        body.append(f'<circle cx="{left + plot_w + 16}" cy="{ly}" r="4" fill="{colour}"/>'
                    f'<text x="{left + plot_w + 26}" y="{ly + 4}">{label}</text>')
    body.append(f'<text x="{left + plot_w + 10}" y="{top + 62}" font-size="11" fill="{GREY}">bars: bootstrap</text>'
                f'<text x="{left + plot_w + 10}" y="{top + 76}" font-size="11" fill="{GREY}">interval</text>')
    return _svg(width, height, title, body, "quality-chart")


def evalue_chart(trajectories: list[dict], title: str) -> str:
    """Each labelled monitor's e-value after every row on a log scale, its threshold ``1/alpha``
    dashed, and a marker where it first reached it."""
    drawn = [t for t in trajectories if t["rows"]]
    width, height, left, right, top, bottom = 860, 280, 64, 150, 16, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    logs = [v for t in drawn for v in t["log_e"]] + [t["threshold_log_e"] for t in drawn]
    low, high = math.floor(min(min(logs) / math.log(10), -1)), math.ceil(max(max(logs) / math.log(10), 1))
    x_max = max(t["rows"][-1] for t in drawn)

    def x(rows: float) -> float:
        return left + plot_w * rows / x_max

    def y(log_e: float) -> float:
        return top + plot_h * (1 - (log_e / math.log(10) - low) / (high - low))

    body = [f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fff" stroke="#9aa3ad"/>']
    step = max(1, math.ceil((high - low) / 8))
    for d in range(low, high + 1, step):
        yy = y(d * math.log(10))
        body.append(f'<line x1="{left}" y1="{yy:.1f}" x2="{left + plot_w}" y2="{yy:.1f}" stroke="#eef1f4"/>'
                    f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end">{evalue(10.0 ** d)}</text>')
    body.append(f'<text transform="translate(14 {top + plot_h / 2}) rotate(-90)" text-anchor="middle">'
                "e-value (log)</text>"
                f'<text x="{left + plot_w / 2}" y="{height - 8}" text-anchor="middle">'
                "labelled rows of the version</text>"
                f'<text x="{left}" y="{top + plot_h + 16}" text-anchor="middle">0</text>'
                f'<text x="{left + plot_w}" y="{top + plot_h + 16}" text-anchor="middle">{x_max}</text>')
    for i, t in enumerate(drawn):
        colour = LINES[i % len(LINES)]
        threshold = y(t["threshold_log_e"])
        line = " ".join(f"{x(r):.1f},{y(v):.1f}" for r, v in zip(t["rows"], t["log_e"], strict=True))
        body.append(f'<g class="trajectory" data-version="{t["version"]}" data-points="{len(t["rows"])}">'
                    f'<line class="threshold" x1="{left}" y1="{threshold:.1f}" x2="{left + plot_w}" '
                    f'y2="{threshold:.1f}" stroke="{ALARM}" stroke-dasharray="6 4"/>'
                    f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        if t["alarm_rows"]:
            at = t["rows"].index(t["alarm_rows"]) if t["alarm_rows"] in t["rows"] else -1
            body.append(f'<circle class="alarm-point" cx="{x(t["rows"][at]):.1f}" cy="{y(t["log_e"][at]):.1f}" '
                        f'r="5" fill="{ALARM}"><title>alarm at row {t["alarm_rows"]}</title></circle>')
        body.append("</g>")
        ly = top + 14 + 18 * i
        body.append(f'<line x1="{left + plot_w + 10}" y1="{ly}" x2="{left + plot_w + 28}" y2="{ly}" '
                    f'stroke="{colour}" stroke-width="2"/><text x="{left + plot_w + 34}" y="{ly + 4}">'
                    f'v{t["version"]}: {evalue(math.exp(min(t["log_e_value"], 700)))}</text>')
    ly = top + 14 + 18 * len(drawn)
    body.append(f'<line x1="{left + plot_w + 10}" y1="{ly}" x2="{left + plot_w + 28}" y2="{ly}" stroke="{ALARM}" '
                f'stroke-dasharray="6 4"/><text x="{left + plot_w + 34}" y="{ly + 4}">1/alpha</text>')
    return _svg(width, height, title, body, "evalue-chart")


def _version(value) -> str:
    return f"v{value}" if isinstance(value, int) else text(value)


def evaluation_chart(evaluations: list[dict], title: str) -> str:
    """Each evaluation's mean loss difference (challenger minus champion, on the loss it decided
    on) with its confidence sequence at the end, and zero: left of zero the challenger is better."""
    width, left, right, row_h = 860, 230, 30, 30
    height = 40 + row_h * len(evaluations)
    plot_w = width - left - right
    parts = [e[e.get("decided_on", "nll")] for e in evaluations]
    span = max([abs(v) for p in parts for v in (*p["confidence_sequence"], p["difference"]) if v is not None]
               + [1e-6]) * 1.1

    def x(v: float) -> float:
        return left + plot_w * (v + span) / (2 * span)

    body = [f'<line x1="{x(0):.1f}" y1="10" x2="{x(0):.1f}" y2="{height - 26}" stroke="{GREY}" '
            'stroke-dasharray="4 3"/>',
            f'<text x="{x(0):.1f}" y="{height - 12}" text-anchor="middle">0</text>'
            f'<text x="{left}" y="{height - 12}">{-span:.3g} (challenger better)</text>'
            f'<text x="{left + plot_w}" y="{height - 12}" text-anchor="end">{span:.3g} (champion better)</text>']
    for i, (e, p) in enumerate(zip(evaluations, parts, strict=True)):
        cy = 24 + row_h * i
        lo, hi = p["confidence_sequence"]
        lo, hi = -span if lo is None else lo, span if hi is None else hi
        body.append(f'<g class="evaluation-interval" data-evaluation="{attr(e["id"])}" data-low="{lo!r}" '
                    f'data-high="{hi!r}"><title>{text(e.get("decided_on", "nll"))} difference {p["difference"]:.4g}, '
                    f'confidence sequence [{lo:.4g}, {hi:.4g}] at alpha {e["alpha"]}</title>'
                    f'<text x="{left - 8}" y="{cy + 4}" text-anchor="end">v{e["challenger"]} vs '
                    f'{_version(e["champion"])}: {text(e["verdict"])}</text>'
                    f'<line x1="{x(max(lo, -span)):.1f}" y1="{cy}" x2="{x(min(hi, span)):.1f}" y2="{cy}" '
                    f'stroke="{CALIBRATED}" stroke-width="2"/><line x1="{x(max(lo, -span)):.1f}" y1="{cy - 5}" '
                    f'x2="{x(max(lo, -span)):.1f}" y2="{cy + 5}" stroke="{CALIBRATED}"/><line '
                    f'x1="{x(min(hi, span)):.1f}" y1="{cy - 5}" x2="{x(min(hi, span)):.1f}" y2="{cy + 5}" '
                    f'stroke="{CALIBRATED}"/><circle cx="{x(p["difference"]):.1f}" cy="{cy}" r="4" '
                    f'fill="{CALIBRATED}"/></g>')
    return _svg(width, height, title, body, "evaluation-chart")
