"""The dashboard's health views in headless Chromium against a live server, with a calibrator whose
served logits drifted (x4, over-confident) until its labelled drift monitor alarmed: the home shows
its alarmed badge and a sparkline, the calibrator page's window selector changes the quality
chart's points, and no request leaves the host.

The screenshots ``home.png`` and ``calibrator.png`` go to ``$CALIBRATION_SCREENSHOT_DIR`` when set
(``docs/screenshots/README.md`` has the command that renews the committed ones), else to a pytest
temporary folder."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.helpers import load_split
from tests.service.support.browser import Isolated, not_blank
from tests.service.support.databases import copy_sqlite_database
from tests.service.support.live import live_server

NAME = "resnet"


def _ok(response, status: int = 200) -> dict:
    assert response.status_code == status, response.text
    return response.json()


def _serve_and_label(api: httpx.Client, logits, labels, prefix: str) -> None:
    ids = [f"{prefix}{i}" for i in range(len(labels))]
    _ok(api.post(f"/v1/calibrators/{NAME}@production/calibrate", json={"logits": logits.tolist(), "ids": ids}))
    deadline, done = time.monotonic() + 60, 0
    while done < len(ids):  # the prediction log is flushed every second: label once the rows are there
        done += _ok(api.post(f"/v1/calibrators/{NAME}/labels", json={"ids": ids, "labels": labels.tolist()}))[
            "labelled"]
        assert time.monotonic() < deadline, done
        time.sleep(0.2) if done < len(ids) else None


@pytest.fixture(scope="module")
def server(tmp_path_factory, sqlite_head):
    """v1 fitted on 2000 CIFAR-10 validation rows and served as ``production`` with logging; 1500
    test rows served as fitted and labelled, then 1500 with logits x4; the monitors evaluated
    (the labelled one alarms); v2 refitted on the labelled rows, 600 more rows observed, v2
    evaluated against v1 and promoted with that evaluation as evidence. The scheduler is off so
    that only these evaluations run."""
    folder = tmp_path_factory.mktemp("dashboard-health")
    url = copy_sqlite_database(sqlite_head, folder / "calibration.db")
    _, val, val_labels = load_split("cifar10_resnet50_cross_entropy", "val")
    _, test, test_labels = load_split("cifar10_resnet50_cross_entropy", "test")
    with live_server(url, env={"CALIBRATION_SCHEDULE_SECONDS": "0"}, log_file=folder / "server.log",
                     migrated=True) as base, \
            httpx.Client(base_url=base, timeout=60) as api:
        _ok(api.post(f"/v1/calibrators/{NAME}/versions", json={"method": "temperature", "logits": val[:2000].tolist(),
                                                               "labels": val_labels[:2000].tolist()}), 201)
        _ok(api.put(f"/v1/calibrators/{NAME}/aliases/production", json={"version": 1}))
        _ok(api.put(f"/v1/calibrators/{NAME}/logging", json={"sample_rate": 1}))
        _serve_and_label(api, test[:1500], test_labels[:1500], "a")
        _serve_and_label(api, 4 * test[1500:3000], test_labels[1500:3000], "b")
        evaluated = _ok(api.post(f"/v1/calibrators/{NAME}/alarms/evaluate", params={"half_life": 200}))
        assert {"version": 1, "signal": "labelled"} in evaluated["new_alarms"], evaluated
        _ok(api.post(f"/v1/calibrators/{NAME}/versions", json={"method": "temperature",
                                                               "data": {"observations": {}}}), 201)
        _ok(api.post(f"/v1/calibrators/{NAME}/observations", json={"logits": (4 * test[3000:3600]).tolist(),
                                                                   "labels": test_labels[3000:3600].tolist()}), 201)
        evaluation = _ok(api.post(f"/v1/calibrators/{NAME}/evaluations", json={"challenger": 2, "champion": 1}), 201)
        _ok(api.put(f"/v1/calibrators/{NAME}/aliases/production", json={"version": 2, "evaluation": evaluation["id"]}))
        yield base, api


def test_the_home_shows_the_alarm_and_the_window_selector_changes_the_chart(browser, server, shots):
    base, api = server
    page = Isolated(browser, base)
    try:
        page.open("/ui")
        row = page.page.locator(f'#calibrators tr[data-name="{NAME}"]')
        badge = row.locator(".badge")
        assert badge.get_attribute("class") == "badge badge-alarmed" and badge.inner_text() == "alarmed"
        assert "labelled v1" in row.inner_text() and "production → v2" in row.inner_text()
        spark = row.locator("svg.sparkline")
        windows = _ok(api.get(f"/v1/calibrators/{NAME}/quality", params={"window": "500", "bootstrap": 0}))["windows"]
        assert spark.count() == 1 and spark.get_attribute("data-points") == str(len(windows)) == "8"
        box = spark.bounding_box()
        assert box["width"] == 120 and box["height"] == 28         # drawn, at its size
        not_blank(page.page.screenshot(path=shots / "home.png", full_page=True))

        row.get_by_role("link", name=NAME).click()
        page.page.wait_for_load_state("load")
        assert page.page.url == f"{base}/ui/calibrators/{NAME}/online"
        chart = page.page.locator("svg.quality-chart")
        points = chart.locator('g.series[data-series="calibrated"] g.point')
        assert points.count() == 8 and chart.locator("g.alarm-marker").count() == 1
        assert page.page.locator("svg.evalue-chart g.trajectory").count() == 1
        assert page.page.locator("svg.evaluation-chart g.evaluation-interval").count() == 1
        not_blank(page.page.screenshot(path=shots / "calibrator.png", full_page=True))

        page.page.locator("nav.windows").get_by_role("link", name="2500 rows").click()
        page.page.wait_for_load_state("load")
        assert page.page.url.endswith("?window=2500")
        assert points.evaluate_all("ps => ps.map(p => p.dataset.window)") == ["rows 0-2499", "rows 2500-4999"]
        page.page.get_by_label("rows per window").fill("1000")
        page.page.get_by_role("button", name="Show").click()
        page.page.wait_for_load_state("load")
        shown = points.evaluate_all("ps => ps.map(p => [p.dataset.window, Number(p.dataset.ece)])")
        expected = _ok(api.get(f"/v1/calibrators/{NAME}/quality", params={"window": "1000", "bootstrap": 0}))
        assert shown == [[w["window"], w["calibrated"]["ece"]["estimate"]] for w in expected["windows"]]
        assert len(shown) == 4
        assert page.elsewhere == [] and page.errors == []
        assert all(url.startswith(base) for url in page.loaded) and len(page.loaded) == 4
    finally:
        page.context.close()
