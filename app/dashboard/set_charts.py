"""Prediction sets on the online page as inline SVG (no script, nothing fetched): the empirical
coverage per window and coverage level with its Wilson interval against the target level (dashed),
and the distribution of set sizes per level over the drawn windows. Every point and bar carries its
numbers in ``data-*`` attributes and a ``<title>``."""

from __future__ import annotations

import math

from .charts import GREY, LINES, _svg
from .html import attr, text


def coverage_levels(windows: list[dict]) -> list[str]:
    """The coverage levels any window has sets for, ascending."""
    return sorted({level for w in windows for level in w.get("coverage", {})}, key=float)


def coverage_chart(windows: list[dict], title: str) -> str:
    """Coverage per window of each level's sets, with its interval, and each target level dashed."""
    levels = coverage_levels(windows)
    width, height, left, right, top, bottom = 860, 300, 64, 150, 16, 70
    plot_w, plot_h = width - left - right, height - top - bottom
    lows = [w["coverage"][lv]["coverage"]["low"] for w in windows for lv in w.get("coverage", {})]
    y_low = max(math.floor(min(lows + [float(lv) for lv in levels]) * 20) / 20 - 0.05, 0.0)
    slot = plot_w / max(len(windows), 1)

    def x(i: int) -> float:
        return left + slot * (i + 0.5)

    def y(v: float) -> float:
        return top + plot_h * (1 - (v - y_low) / (1 - y_low))

    body = [f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fff" stroke="#9aa3ad"/>']
    for i in range(5):
        v = y_low + (1 - y_low) * i / 4
        body.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{left + plot_w}" y2="{y(v):.1f}" stroke="#eef1f4"/>'
                    f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.3f}</text>')
    body.append(f'<text transform="translate(14 {top + plot_h / 2}) rotate(-90)" text-anchor="middle">'
                "coverage</text>")
    every = max(1, math.ceil(len(windows) / 12))
    for i, w in enumerate(windows):
        if i % every == 0:
            body.append(f'<text x="{x(i):.1f}" y="{top + plot_h + 14}" text-anchor="end" font-size="10" '
                        f'transform="rotate(-30 {x(i):.1f} {top + plot_h + 14})">{text(w["window"])}</text>')
    for j, level in enumerate(levels):
        colour = LINES[j % len(LINES)]
        offset = (j - (len(levels) - 1) / 2) * 0.15
        body.append(f'<g class="coverage-series" data-level="{attr(level)}"><line class="target" x1="{left}" '
                    f'y1="{y(float(level)):.1f}" x2="{left + plot_w}" y2="{y(float(level)):.1f}" stroke="{colour}" '
                    'stroke-dasharray="6 4"/>')
        points = []
        for i, w in enumerate(windows):
            part = w.get("coverage", {}).get(level)
            if part is None:
                continue
            c, cx = part["coverage"], x(i) + offset * slot * 0.5
            points.append(f"{cx:.1f},{y(c['estimate']):.1f}")
            body.append(f'<g class="coverage-point" data-window="{attr(w["window"])}" data-level="{attr(level)}" '
                        f'data-coverage="{c["estimate"]!r}" data-low="{c["low"]!r}" data-high="{c["high"]!r}">'
                        f'<title>{text(w["window"])}: coverage {c["estimate"]:.4f} [{c["low"]:.4f}, {c["high"]:.4f}] '
                        f'of the {text(level)} sets, mean size {part["mean_set_size"]:.2f} ({part["n_rows"]} rows)'
                        f'</title><line x1="{cx:.1f}" y1="{y(c["low"]):.1f}" x2="{cx:.1f}" y2="{y(c["high"]):.1f}" '
                        f'stroke="{colour}"/><circle cx="{cx:.1f}" cy="{y(c["estimate"]):.1f}" r="3.5" '
                        f'fill="{colour}"/></g>')
        body.append(f'<polyline points="{" ".join(points)}" fill="none" stroke="{colour}" stroke-opacity="0.6"/></g>')
        ly = top + 14 + 18 * j
        body.append(f'<circle cx="{left + plot_w + 16}" cy="{ly}" r="4" fill="{colour}"/>'
                    f'<text x="{left + plot_w + 26}" y="{ly + 4}">sets at {text(level)}</text>')
    ly = top + 14 + 18 * len(levels)
    body.append(f'<text x="{left + plot_w + 10}" y="{ly + 4}" font-size="11" fill="{GREY}">dashed: target</text>'
                f'<text x="{left + plot_w + 10}" y="{ly + 18}" font-size="11" fill="{GREY}">bars: Wilson</text>')
    return _svg(width, height, title, body, "coverage-chart")


def set_size_chart(windows: list[dict], title: str) -> str:
    """Per coverage level, how many labelled rows had sets of each size (0 to k classes), over the
    drawn windows."""
    levels = coverage_levels(windows)
    counts = {lv: [sum(c) for c in zip(*[w["coverage"][lv]["size_counts"] for w in windows
                                          if lv in w.get("coverage", {})], strict=True)] for lv in levels}
    biggest = max((s for c in counts.values() for s, n in enumerate(c) if n), default=1)
    sizes = list(range(biggest + 1))
    width, left, right, top, bottom = 860, 64, 150, 16, 44
    height = 240
    plot_w, plot_h = width - left - right, height - top - bottom
    top_count = max((n for c in counts.values() for n in c), default=1) or 1
    slot = plot_w / len(sizes)
    bar = slot * 0.8 / max(len(levels), 1)
    body = [f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fff" stroke="#9aa3ad"/>',
            f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle">set size (classes)</text>',
            f'<text transform="translate(14 {top + plot_h / 2}) rotate(-90)" text-anchor="middle">rows</text>',
            f'<text x="{left - 6}" y="{top + 10}" text-anchor="end">{top_count}</text>']
    every = max(1, math.ceil(len(sizes) / 20))
    for s in sizes:
        if s % every == 0:
            body.append(f'<text x="{left + slot * (s + 0.5):.1f}" y="{top + plot_h + 14}" text-anchor="middle" '
                        f'font-size="10">{s}</text>')
    for j, level in enumerate(levels):
        colour = LINES[j % len(LINES)]
        total = sum(counts[level]) or 1
        body.append(f'<g class="size-series" data-level="{attr(level)}">')
        for s in sizes:
            n = counts[level][s] if s < len(counts[level]) else 0
            h = plot_h * n / top_count
            bx = left + slot * s + slot * 0.1 + bar * j
            body.append(f'<rect class="size-bar" data-size="{s}" data-count="{n}" x="{bx:.1f}" '
                        f'y="{top + plot_h - h:.1f}" width="{bar:.1f}" height="{h:.1f}" fill="{colour}">'
                        f'<title>{text(level)} sets of {s} classes: {n} rows ({n / total:.1%})</title></rect>')
        body.append("</g>")
        ly = top + 14 + 18 * j
        body.append(f'<rect x="{left + plot_w + 10}" y="{ly - 6}" width="12" height="12" fill="{colour}"/>'
                    f'<text x="{left + plot_w + 28}" y="{ly + 4}">sets at {text(level)}</text>')
    return _svg(width, height, title, body, "set-size-chart")
