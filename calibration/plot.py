"""Reliability diagrams drawn with matplotlib (the optional ``plot`` extra).

Top panel: accuracy against mean confidence per bin for each series (e.g. "before" and
"after" calibration) over the diagonal of perfect calibration. Each non-empty bin is a marker
whose area grows with its count, with the Wilson interval of its accuracy as an error bar;
bins with fewer than ``WEAK_COUNT`` samples are drawn light, as they say little. The legend
gives each series' ECE with its bootstrap interval. Bottom panel: the count of each bin on a
log scale (light where weak). The statistics come from ``calibration.reliability``, which the
service's SVG dashboard draws too, so both pictures say the same.

Returned as PNG or SVG bytes. matplotlib is imported only when a figure is drawn, through its
object-oriented API (no global pyplot state), so drawing is safe from several threads.
"""

from __future__ import annotations

import io

import numpy as np

from .metrics.binned import reliability_diagram
from .reliability import (
    DEFAULT_RESAMPLES,
    SERIES_COLOURS,
    WEAK_COUNT,
    WEAK_OPACITY,
    ReliabilityBins,
    ece_interval,
    legend_label,
)

FORMATS = ("png", "svg")


def _draw_series(top, bottom, name: str, bins: ReliabilityBins, interval, colour: str, slot: int,
                 n_series: int) -> None:
    from matplotlib.colors import to_rgba

    alpha = np.where(bins.weak, WEAK_OPACITY, 1.0)
    top.plot(bins.mean_confidence, bins.accuracy, color=colour, linewidth=1, alpha=0.6, zorder=2)
    for weak in (False, True):
        chosen = bins.weak == weak
        if chosen.any():
            x, y = bins.mean_confidence[chosen], bins.accuracy[chosen]
            below, above = y - bins.accuracy_low[chosen], bins.accuracy_high[chosen] - y
            top.errorbar(x, y, yerr=np.maximum(0.0, np.vstack([below, above])),
                         fmt="none", ecolor=colour, alpha=WEAK_OPACITY if weak else 0.9, capsize=2,
                         linewidth=1, zorder=3)
    top.scatter(bins.mean_confidence, bins.accuracy, s=bins.area,
                c=[to_rgba(colour, a) for a in alpha], edgecolors="white", linewidths=0.5, zorder=4)
    top.scatter([], [], s=60, color=colour, label=legend_label(name, interval))  # the legend's solid marker
    width = (bins.upper - bins.lower) / n_series
    bottom.bar(bins.lower + slot * width, bins.count, width=width, align="edge",
               color=[to_rgba(colour, 0.85 * a) for a in alpha], label=name)


def reliability_figure(series: dict[str, np.ndarray], labels, n_bins: int = 15,
                       format: str = "png", title: str | None = None, confidence: float = 0.95,
                       n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> bytes:
    """Draw the reliability diagram of each named probability array against ``labels``:
    Wilson intervals per bin at ``confidence``, marker areas proportional to the counts, weak
    bins light, and each series' ECE with its bootstrap interval (``n_resamples`` row
    resamples, ``seed``) in the legend."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    if not series:
        raise ValueError("give at least one series of probabilities to draw")
    try:
        from matplotlib import rc_context
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "drawing reliability diagrams needs matplotlib: pip install 'calibration-service[plot]'"
        ) from exc
    figure = Figure(figsize=(6, 7))
    top, bottom = figure.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    top.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1, label="perfect calibration")
    for slot, (name, probs) in enumerate(series.items()):
        bins = ReliabilityBins.from_diagram(reliability_diagram(probs, labels, n_bins=n_bins), confidence)
        interval = ece_interval(probs, labels, n_bins, n_resamples, confidence, seed)
        _draw_series(top, bottom, name, bins, interval, SERIES_COLOURS[slot % len(SERIES_COLOURS)], slot,
                     len(series))
    top.set_ylabel(f"accuracy ({round(100 * confidence)}% Wilson interval)")
    top.set_xlim(0, 1)
    top.set_ylim(0, 1)
    top.legend(loc="upper left", fontsize="small",
               title=f"marker area ∝ count; light: < {WEAK_COUNT} samples", title_fontsize="x-small")
    top.set_title(title or "Reliability diagram")
    bottom.set_yscale("log")
    bottom.set_ylim(bottom=0.5)  # a bin of one sample still shows
    bottom.set_xlabel("confidence (top-label probability)")
    bottom.set_ylabel("count (log)")
    figure.tight_layout()
    buffer = io.BytesIO()
    with rc_context({"svg.fonttype": "none"}):  # SVG text stays text, not glyph paths
        figure.savefig(buffer, format=format)
    return buffer.getvalue()
