"""The online page's prediction-set charts (app.dashboard.set_charts) from windows of
``app.monitoring.coverage``: valid SVG whose points and bars carry the window numbers."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest

from app.dashboard.set_charts import coverage_chart, coverage_levels, set_size_chart
from app.monitoring.coverage import coverage_summary

SVG = "{http://www.w3.org/2000/svg}"


def _windows():
    rng = np.random.default_rng(0)
    out = []
    for i, rate in enumerate((0.91, 0.90, 0.75)):
        covered = rng.random(400) < rate
        sizes = rng.integers(0, 4, 400)
        wide = rng.random(400) < 0.97
        out.append({"window": f"rows {400 * i}-{400 * i + 399}", "n_rows": 400,
                    "coverage": {"0.9": coverage_summary(covered, sizes, 3),
                                 "0.95": coverage_summary(wide, np.minimum(sizes + 1, 3), 3)}})
    out.append({"window": "rows 1200-1599", "n_rows": 10, "coverage": {}})  # no set predictor then
    return out


def test_the_coverage_chart_draws_each_window_and_level_with_its_interval():
    windows = _windows()
    assert coverage_levels(windows) == ["0.9", "0.95"]
    root = ET.fromstring(coverage_chart(windows, 'demo "sets" <b>'))
    points = root.iter(f"{SVG}g")
    drawn = [g for g in points if g.get("class") == "coverage-point"]
    assert len(drawn) == 6
    for g in drawn:
        window = next(w for w in windows if w["window"] == g.get("data-window"))
        numbers = window["coverage"][g.get("data-level")]["coverage"]
        assert float(g.get("data-coverage")) == numbers["estimate"]
        assert float(g.get("data-low")) == pytest.approx(numbers["low"])
        assert float(g.get("data-low")) <= float(g.get("data-coverage")) <= float(g.get("data-high"))
    assert root.find(f"{SVG}title").text == 'demo "sets" <b>'
    targets = [line for line in root.iter(f"{SVG}line") if line.get("class") == "target"]
    assert len(targets) == 2


def test_the_set_size_chart_sums_the_windows_sizes_per_level():
    windows = _windows()
    root = ET.fromstring(set_size_chart(windows, "sizes"))
    bars = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "size-bar"]
    by_level = {}
    for g in root.iter(f"{SVG}g"):
        if g.get("class") == "size-series":
            by_level[g.get("data-level")] = {int(r.get("data-size")): int(r.get("data-count"))
                                             for r in g.iter(f"{SVG}rect")}
    expected = np.sum([w["coverage"]["0.9"]["size_counts"] for w in windows[:3]], axis=0)
    assert [by_level["0.9"][s] for s in range(4)] == expected.tolist()
    assert sum(by_level["0.95"].values()) == 1200 and by_level["0.95"][0] == 0
    assert len(bars) == 2 * 4
