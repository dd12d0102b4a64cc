"""Calibration quality over time drawn with matplotlib (the optional ``plot`` extra): one point
per window, each metric with its interval as an error bar.

Top panel: the ECE of the calibrated probabilities and of the uncalibrated inputs per window.
Bottom panel: the accuracy and the mean confidence (the expected accuracy if the calibration
holds) of the calibrated probabilities: a gap between the two lines is miscalibration, a drop of
both is a harder stream. Returned as PNG or SVG bytes; matplotlib is imported only when drawing,
through its object-oriented API (no pyplot state), as in ``calibration.plot``.
"""

from __future__ import annotations

import io

import numpy as np

from .reliability import SERIES_COLOURS

FORMATS = ("png", "svg")


def _errorbar(axes, x, values: list[dict], label: str, colour: str, offset: float) -> None:
    estimate = np.array([v["estimate"] if v["estimate"] is not None else np.nan for v in values], dtype=float)
    low = np.array([v.get("low") if v.get("low") is not None else e for v, e in zip(values, estimate, strict=True)],
                   dtype=float)
    high = np.array([v.get("high") if v.get("high") is not None else e for v, e in zip(values, estimate,
                                                                                        strict=True)], dtype=float)
    error = np.vstack([np.clip(estimate - low, 0, None), np.clip(high - estimate, 0, None)])
    axes.errorbar(x + offset, estimate, yerr=error, marker="o", markersize=4, capsize=3, linewidth=1,
                  color=colour, label=label)


def quality_figure(windows: list[str], panels: dict[str, dict[str, list[dict]]], format: str = "png",
                   title: str | None = None) -> bytes:
    """Draw ``panels`` (panel title -> series name -> one ``{"estimate", "low", "high"}`` per
    window) against the window labels ``windows``, one panel above the other."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    if not windows or not panels:
        raise ValueError("give at least one window and one panel to draw")
    try:
        from matplotlib import rc_context
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("drawing needs matplotlib: pip install 'calibration-service[plot]'") from exc
    figure = Figure(figsize=(max(6.0, 0.6 * len(windows) + 2), 3.2 * len(panels)))
    axes = np.atleast_1d(figure.subplots(len(panels), 1, sharex=True))
    x = np.arange(len(windows), dtype=float)
    for ax, (panel, series) in zip(axes, panels.items(), strict=True):
        for slot, (name, values) in enumerate(series.items()):
            _errorbar(ax, x, values, name, SERIES_COLOURS[slot % len(SERIES_COLOURS)], 0.08 * (slot - 0.5))
        ax.set_ylabel(panel)
        ax.legend(loc="best", fontsize="small")
        ax.grid(alpha=0.3)
    axes[-1].set_xticks(x, windows, rotation=30, ha="right", fontsize="small")
    axes[0].set_title(title or "Calibration quality per window")
    figure.tight_layout()
    buffer = io.BytesIO()
    with rc_context({"svg.fonttype": "none"}):
        figure.savefig(buffer, format=format)
    return buffer.getvalue()
