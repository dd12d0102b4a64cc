"""Reliability diagrams drawn with matplotlib (the optional ``plot`` extra).

Top panel: accuracy against mean confidence per bin for each series (e.g. "before" and
"after" calibration) over the diagonal of perfect calibration; bottom panel: the histogram of
top-label confidences of each series. Returned as PNG or SVG bytes. matplotlib is imported
only when a figure is drawn, through its object-oriented API (no global pyplot state), so
drawing is safe from several threads.
"""

from __future__ import annotations

import io

import numpy as np

from .metrics.binned import ece, reliability_diagram

FORMATS = ("png", "svg")


def reliability_figure(series: dict[str, np.ndarray], labels, n_bins: int = 15,
                       format: str = "png", title: str | None = None) -> bytes:
    """Draw the reliability diagram of each named probability array against ``labels``."""
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
    figure = Figure(figsize=(5.5, 6.5))
    top, bottom = figure.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    top.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1, label="perfect calibration")
    for name, probs in series.items():
        diagram = reliability_diagram(probs, labels, n_bins=n_bins)
        full = diagram.count > 0
        error = ece(probs, labels, n_bins=n_bins)
        top.plot(diagram.mean_confidence[full], diagram.accuracy[full], marker="o",
                 label=f"{name} (ECE {100 * error:.2f}%)")
        confidences = np.asarray(probs, dtype=np.float64)
        confidences = (np.maximum(confidences, 1 - confidences) if confidences.ndim == 1
                       else confidences.max(axis=1))
        bottom.hist(confidences, bins=np.linspace(0, 1, n_bins + 1), alpha=0.5, label=name)
    top.set_ylabel("accuracy")
    top.set_xlim(0, 1)
    top.set_ylim(0, 1)
    top.legend(loc="upper left", fontsize="small")
    top.set_title(title or "Reliability diagram")
    bottom.set_xlabel("confidence (top-label probability)")
    bottom.set_ylabel("count")
    figure.tight_layout()
    buffer = io.BytesIO()
    with rc_context({"svg.fonttype": "none"}):  # SVG text stays text, not glyph paths
        figure.savefig(buffer, format=format)
    return buffer.getvalue()
