"""The reliability diagram as inline SVG, drawn from a stored report's bins in the style of
``calibration.plot`` (the same numbers from ``calibration.reliability``): markers whose area
grows with the count, Wilson intervals per bin, weak bins light, counts on a log scale and
each series' ECE with its interval in the legend. Text is escaped; the picture has a
``<title>`` and a ``<desc>`` (``role="img"``), and each marker a ``<title>`` of its numbers."""

from __future__ import annotations

import math

import calibration as cal

from .html import attr, text

LEFT, RIGHT, TOP = 64, 330, 16              # the legend stands right of the panels, over no mark
PLOT = 560                                  # the square panel's side
BARS_TOP, BARS_HEIGHT = TOP + PLOT + 24, 96  # the counts' panel below it
WIDTH, HEIGHT = LEFT + PLOT + RIGHT, BARS_TOP + BARS_HEIGHT + 44
GREY = "#6b7280"


def _x(value: float) -> float:
    return LEFT + PLOT * value


def _y(value: float) -> float:
    return TOP + PLOT * (1 - value)


def series_intervals(report: dict, names: tuple[str, ...]) -> dict[str, cal.Interval]:
    """Each series' ECE and its interval: the stored bootstrap interval where the report has one,
    else ``cal.ece_interval_from_bins`` around the stored ECE."""
    out = {}
    for name in names:
        part = report[name]
        stored = (part.get("intervals") or {}).get("ece")
        if stored and stored.get("low") is not None:
            out[name] = cal.Interval(stored["estimate"], stored["low"], stored["high"], stored["confidence"],
                                     stored["n_resamples"])
            continue
        bins = part["reliability_diagram"]
        approx = cal.ece_interval_from_bins(bins["count"], bins["mean_confidence"], bins["accuracy"])
        ece = part["metrics"].get("ece")
        out[name] = cal.Interval(approx.estimate if ece is None else ece, approx.low, approx.high,
                                 approx.confidence, approx.n_resamples)
    return out


def _axes() -> list[str]:
    out = [f'<rect x="{LEFT}" y="{TOP}" width="{PLOT}" height="{PLOT}" fill="#fff" stroke="#9aa3ad"/>']
    for i in range(6):
        v = i / 5
        out.append(f'<line x1="{_x(v):.1f}" y1="{TOP}" x2="{_x(v):.1f}" y2="{TOP + PLOT}" stroke="#eef1f4"/>')
        out.append(f'<line x1="{LEFT}" y1="{_y(v):.1f}" x2="{LEFT + PLOT}" y2="{_y(v):.1f}" stroke="#eef1f4"/>')
        out.append(f'<text x="{LEFT - 8}" y="{_y(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
        out.append(f'<text x="{_x(v):.1f}" y="{BARS_TOP + BARS_HEIGHT + 18}" text-anchor="middle">{v:.1f}</text>')
    out.append(f'<line x1="{_x(0)}" y1="{_y(0)}" x2="{_x(1)}" y2="{_y(1)}" stroke="{GREY}" stroke-dasharray="5 4"/>')
    out.append(f'<text transform="translate(16 {TOP + PLOT / 2}) rotate(-90)" text-anchor="middle">'
               "accuracy (95% Wilson interval)</text>")
    out.append(f'<text x="{LEFT + PLOT / 2}" y="{HEIGHT - 6}" text-anchor="middle">'
               "confidence (top-label probability)</text>")
    return out


def _series(name: str, bins: cal.ReliabilityBins, colour: str) -> list[str]:
    out = [f'<g class="series" data-series="{attr(name)}">']
    if bins.count.size:
        points = " ".join(f"{_x(c):.1f},{_y(a):.1f}" for c, a in zip(bins.mean_confidence, bins.accuracy, strict=True))
        out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-opacity="0.6"/>')
    for i in range(bins.count.size):
        conf, acc, low, high = (float(bins.mean_confidence[i]), float(bins.accuracy[i]),
                                float(bins.accuracy_low[i]), float(bins.accuracy_high[i]))
        weak = bool(bins.weak[i])
        opacity = cal.WEAK_OPACITY if weak else 1.0
        radius = math.sqrt(float(bins.area[i]) / math.pi) * 1.25
        says = (f"{name}: bin ({bins.lower[i]:.3f}, {bins.upper[i]:.3f}], {int(bins.count[i])} samples, "
                f"mean confidence {conf:.4f}, accuracy {acc:.4f}, 95% interval [{low:.4f}, {high:.4f}]"
                + (" (few samples)" if weak else ""))
        out.append(f'<g class="bin{" weak" if weak else ""}" opacity="{opacity}" data-count="{int(bins.count[i])}">'
                   f"<title>{text(says)}</title>"
                   f'<line x1="{_x(conf):.1f}" y1="{_y(low):.1f}" x2="{_x(conf):.1f}" y2="{_y(high):.1f}" '
                   f'stroke="{colour}" stroke-width="1.2"/>'
                   f'<circle cx="{_x(conf):.1f}" cy="{_y(acc):.1f}" r="{radius:.1f}" fill="{colour}" '
                   f'stroke="#fff" stroke-width="0.7"/></g>')
    out.append("</g>")
    return out


def _bars(all_bins: list[tuple[str, cal.ReliabilityBins, str]]) -> list[str]:
    top = max((int(b.count.max()) for _, b, _ in all_bins if b.count.size), default=1)
    decades = max(1, math.ceil(math.log10(max(top, 1)) + 1e-9))
    scale = BARS_HEIGHT / decades  # height of one decade; a count of 1 gets a sliver

    def height(count: int) -> float:
        return max(2.0, scale * math.log10(count)) if count > 1 else 2.0

    out = [f'<rect x="{LEFT}" y="{BARS_TOP}" width="{PLOT}" height="{BARS_HEIGHT}" fill="#fff" stroke="#9aa3ad"/>',
           f'<text transform="translate(16 {BARS_TOP + BARS_HEIGHT / 2}) rotate(-90)" text-anchor="middle">'
           "count (log)</text>"]
    for d in range(decades + 1):
        y = BARS_TOP + BARS_HEIGHT - d * scale
        out.append(f'<text x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end">{10 ** d:g}</text>')
    for slot, (name, bins, colour) in enumerate(all_bins):
        for i in range(bins.count.size):
            width = PLOT * (bins.upper[i] - bins.lower[i]) / len(all_bins)
            x = _x(bins.lower[i]) + slot * width
            h = height(int(bins.count[i]))
            opacity = 0.85 * (cal.WEAK_OPACITY if bins.weak[i] else 1.0)
            out.append(f'<rect class="bar" x="{x:.1f}" y="{BARS_TOP + BARS_HEIGHT - h:.1f}" width="{width:.1f}" '
                       f'height="{h:.1f}" fill="{colour}" fill-opacity="{opacity:.2f}">'
                       f"<title>{text(name)}: {int(bins.count[i])} samples</title></rect>")
    return out


def _legend(entries: list[tuple[str, str]]) -> list[str]:
    x0 = LEFT + PLOT + 16
    out = [f'<g class="legend"><rect x="{x0}" y="{TOP}" width="{RIGHT - 24}" '
           f'height="{22 + 18 * (len(entries) + 1)}" fill="#fff" stroke="#d6dbe1"/>',
           f'<text x="{x0 + 8}" y="{TOP + 16}" font-size="11" fill="{GREY}">marker area ∝ count; '
           f"light: &lt; {cal.WEAK_COUNT} samples</text>",
           f'<line x1="{x0 + 8}" y1="{TOP + 30}" x2="{x0 + 26}" y2="{TOP + 30}" stroke="{GREY}" '
           f'stroke-dasharray="5 4"/><text x="{x0 + 34}" y="{TOP + 34}">perfect calibration</text>']
    for i, (label, colour) in enumerate(entries):
        y = TOP + 48 + 18 * i
        out.append(f'<circle cx="{x0 + 17}" cy="{y}" r="5" fill="{colour}"/>'
                   f'<text class="legend-entry" x="{x0 + 34}" y="{y + 4}">{text(label)}</text>')
    out.append("</g>")
    return out


def reliability_svg(report: dict, title: str, names: tuple[str, ...] = ("before", "after")) -> str:
    """The diagram of the series ``names`` of a stored report (``reports.comparison``'s shape)."""
    names = tuple(n for n in names if n in report)
    intervals = series_intervals(report, names)
    drawn = [(name, cal.ReliabilityBins.from_diagram(report[name]["reliability_diagram"]),
              cal.SERIES_COLOURS[i % len(cal.SERIES_COLOURS)]) for i, name in enumerate(names)]
    labels = [cal.legend_label(name, intervals[name]) for name in names]
    description = (f"Accuracy against mean confidence in {len(report[names[0]]['reliability_diagram']['count'])} "
                   f"equal-width bins for {', '.join(names)}, with the diagonal of perfect calibration. "
                   + "; ".join(labels) + ".") if names else "No bins to draw."
    body = [*_axes()]
    for name, bins, colour in drawn:
        body.extend(_series(name, bins, colour))
    body.extend(_bars(drawn))
    body.extend(_legend(list(zip(labels, [c for _, _, c in drawn], strict=True))))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
            f'height="{HEIGHT}" role="img" aria-labelledby="reliability-title reliability-desc" '
            f'font-family="system-ui, sans-serif" font-size="12" fill="#1b1f24" class="reliability">'
            f'<title id="reliability-title">{text(title)}</title><desc id="reliability-desc">{text(description)}</desc>'
            + "".join(body) + "</svg>")
