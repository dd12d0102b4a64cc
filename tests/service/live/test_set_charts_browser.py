"""The online page's prediction-set charts in headless Chromium against a live server: a calibrator
with a set predictor at coverage 0.9 and 0.95 whose served sets were labelled (1500 rows as fitted,
then 1500 with the model's logits doubled). The coverage chart has a point per window and level
holding the quality API's numbers, the set-size chart's bars add up to the labelled rows, and nothing
is fetched from another host. Screenshot ``prediction_sets.png`` (see tests/service/support/browser.py)."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers import load_split
from tests.service.support.browser import Isolated, not_blank
from tests.service.support.databases import copy_sqlite_database
from tests.service.support.live import live_server

NAME = "lenet-sets"


def _ok(response, status: int = 200) -> dict:
    assert response.status_code == status, response.text
    return response.json()


@pytest.fixture(scope="module")
def server(tmp_path_factory, sqlite_head):
    folder = tmp_path_factory.mktemp("dashboard-sets")
    url = copy_sqlite_database(sqlite_head, folder / "calibration.db")
    _, val, val_labels = load_split("cifar10_lenet5", "val")
    _, test, test_labels = load_split("cifar10_lenet5", "test")
    with live_server(url, env={"CALIBRATION_SCHEDULE_SECONDS": "0", "CALIBRATION_LOG_WRITER": "thread"},
                     log_file=folder / "server.log", migrated=True) as base, \
            httpx.Client(base_url=base, timeout=60) as api:
        _ok(api.post(f"/v1/calibrators/{NAME}/versions", json={
            "method": "temperature", "probabilities": val[:2500].tolist(), "labels": val_labels[:2500].tolist()}), 201)
        _ok(api.post(f"/v1/calibrators/{NAME}/versions/1/set-predictors", json={
            "score": "aps", "coverage": [0.9, 0.95], "probabilities": val[2500:].tolist(),
            "labels": val_labels[2500:].tolist()}), 201)
        _ok(api.put(f"/v1/calibrators/{NAME}/logging", json={"sample_rate": 1}))
        for start in range(0, 3000, 500):
            probs = test[start:start + 500] ** (2 if start >= 1500 else 1)
            probs = probs / probs.sum(axis=1, keepdims=True)
            ids = [f"s{start + i}" for i in range(500)]
            _ok(api.post(f"/v1/calibrators/{NAME}/calibrate", json={"probabilities": probs.tolist(), "ids": ids}))
            labelled = _ok(api.post(f"/v1/calibrators/{NAME}/labels", json={
                "ids": ids, "labels": test_labels[start:start + 500].tolist()}))["labelled"]
            assert labelled == 500
        yield base, api


def test_the_online_page_draws_coverage_per_window_and_set_sizes(browser, server, shots):
    base, api = server
    page = Isolated(browser, base)
    try:
        page.open(f"/ui/calibrators/{NAME}/online?window=500")
        quality = _ok(api.get(f"/v1/calibrators/{NAME}/quality", params={"window": "500", "bootstrap": 100}))
        chart = page.page.locator("svg.coverage-chart")
        assert chart.count() == 1
        shown = chart.locator("g.coverage-point").evaluate_all(
            "ps => ps.map(p => [p.dataset.window, p.dataset.level, Number(p.dataset.coverage), Number(p.dataset.low)])")
        expected = [[w["window"], level, w["coverage"][level]["coverage"]["estimate"],
                     w["coverage"][level]["coverage"]["low"]]
                    for level in ("0.9", "0.95") for w in quality["windows"]]
        assert shown == expected and len(shown) == 12
        first, last = quality["windows"][0]["coverage"]["0.9"], quality["windows"][-1]["coverage"]["0.9"]
        assert first["coverage"]["high"] >= 0.9 > last["coverage"]["high"]  # the shift shows
        assert chart.locator("line.target").count() == 2
        bars = page.page.locator("svg.set-size-chart rect.size-bar")
        counts = bars.evaluate_all("bs => bs.map(b => [b.parentElement.dataset.level, Number(b.dataset.count)])")
        for level in ("0.9", "0.95"):
            assert sum(n for shown_level, n in counts if shown_level == level) == 3000
        box = chart.bounding_box()
        assert box["width"] == 860 and box["height"] == 300
        not_blank(page.page.screenshot(path=shots / "prediction_sets.png", full_page=True))
        assert page.elsewhere == [] and page.errors == []
    finally:
        page.context.close()
