"""The dashboard's health views without a browser, on real CIFAR-10 logits: the home's row of an
alarmed calibrator (badge, ECE and sparkline equal to the quality API's), of one without labels
(badge and the next command), the calibrator page's quality chart per window (its points are the
API's windows, the alarm marked in the window holding its row), the e-value trajectory replayed to
the stored e-value, evaluations linked from the alias history, and e-values written as read."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from starlette.testclient import TestClient

from app.dashboard.html import evalue
from app.dashboard.reads import row_window, trajectories
from app.main import create_app
from app.monitoring import quality
from app.platform.errors import InvalidInput
from app.platform.migrate import upgrade
from app.settings import Settings
from tests.helpers import load_split
from tests.service.support.databases import create_postgres_database

NAME, QUIET = "drifting", "quiet"


def _ok(response, status: int = 200) -> dict:
    assert response.status_code == status, response.text
    return response.json()


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def api(request, tmp_path_factory):
    """``drifting``: v1 fitted on 2000 validation rows, 2000 test rows served and labelled as
    fitted, then 2000 with logits x4 (over-confident) and its labelled monitor evaluated (it
    alarms); v2 fitted on the first 4000 labelled rows, 600 rows observed after it, an evaluation
    of v2 against v1, and ``production`` moved to v2 with it as evidence. ``quiet``: fitted only."""
    drop = None
    if request.param == "postgres":
        url, drop = create_postgres_database()
    else:
        url = f"sqlite:///{tmp_path_factory.mktemp('health') / 'calibration.db'}"
    upgrade(url)
    try:
        yield from _filled(url)
    finally:
        if drop is not None:
            drop()


def _filled(url: str):
    _, val, val_labels = load_split("cifar10_resnet50_cross_entropy", "val")
    _, test, test_labels = load_split("cifar10_resnet50_cross_entropy", "test")
    with TestClient(create_app(Settings(database_url=url, job_engine="embedded", schedule_seconds=0))) as client:
        fit = {"method": "temperature", "logits": val[:2000].tolist(), "labels": val_labels[:2000].tolist()}
        _ok(client.post(f"/v1/calibrators/{NAME}/versions", json=fit), 201)
        _ok(client.post(f"/v1/calibrators/{QUIET}/versions", json=fit), 201)
        _ok(client.put(f"/v1/calibrators/{NAME}/aliases/production", json={"version": 1}))
        _ok(client.put(f"/v1/calibrators/{NAME}/logging", json={"sample_rate": 1.0}))
        for start in range(0, 4000, 1000):
            scale = 1 if start < 2000 else 4
            ids = [f"p{start + i}" for i in range(1000)]
            _ok(client.post(f"/v1/calibrators/{NAME}@production/calibrate",
                            json={"logits": (scale * test[start:start + 1000]).tolist(), "ids": ids}))
            _ok(client.post(f"/v1/calibrators/{NAME}/labels",
                            json={"ids": ids, "labels": test_labels[start:start + 1000].tolist()}))
        _ok(client.post(f"/v1/calibrators/{NAME}/alarms/evaluate", params={"half_life": 200}))
        _ok(client.post(f"/v1/calibrators/{NAME}/versions",
                        json={"method": "temperature", "data": {"observations": {}}}), 201)
        _ok(client.post(f"/v1/calibrators/{NAME}/observations",
                        json={"logits": (4 * test[4000:4600]).tolist(), "labels": test_labels[4000:4600].tolist()}),
            201)
        evaluation = _ok(client.post(f"/v1/calibrators/{NAME}/evaluations", json={"challenger": 2, "champion": 1}),
                         201)
        _ok(client.put(f"/v1/calibrators/{NAME}/aliases/production",
                       json={"version": 2, "evaluation": evaluation["id"]}))
        yield client, evaluation


@pytest.fixture(scope="module")
def online_page(api) -> str:
    """The calibrator page at its default window, read once: it computes every window's bootstrap
    intervals, and the tests below only read it."""
    client, _ = api
    page = client.get(f"/ui/calibrators/{NAME}/online")
    assert page.status_code == 200
    return page.text


def test_e_values_are_written_as_read():
    assert evalue(124398034511560224.0) == "1.24e17"
    assert [evalue(v) for v in (3.14159265, 100.0, 0.5, 9999.4, 12345.0)] == ["3.142", "100", "0.5", "9999", "1.23e4"]
    assert [evalue(v) for v in (2.5e-5, 0.0, math.exp(700), None, math.inf)] == ["2.5e-5", "0", "1.01e304", "—", "—"]


def _row(html: str, name: str) -> str:
    return re.search(rf'<tr data-name="{name}".*?</tr>', html, re.S).group(0)


def test_the_home_shows_the_alarm_with_its_monitor_the_ece_sparkline_and_labels(api):
    client, _ = api
    page = client.get("/ui")
    assert page.status_code == 200
    html = page.text
    drifting, quiet = _row(html, NAME), _row(html, QUIET)
    assert 'data-state="alarmed"' in drifting and 'class="badge badge-alarmed"' in drifting
    assert "labelled v1" in drifting and "production → v2" in drifting
    assert 'class="badge badge-no-labels"' in quiet and 'data-state="no labels"' in quiet
    assert '<p id="verdict" class="badge badge-alarmed">1 of 2 calibrator(s) alarmed</p>' in html
    summary = _ok(client.get(f"/v1/calibrators/{NAME}/observations"))
    window = row_window(summary["total_rows"])
    assert (summary["total_rows"], window) == (4600, "500")         # 4600 rows in 10 windows of 500
    windows = _ok(client.get(f"/v1/calibrators/{NAME}/quality", params={"window": window, "bootstrap": 0}))["windows"]
    newest = windows[-1]["calibrated"]["ece"]["estimate"]
    assert f'<td class="ece" data-value="{newest!r}">{newest:.4f} ' in drifting
    assert f'data-points="{len(windows)}"' in drifting and len(windows) == 10
    assert 'data-logged="4000" data-labelled="4000">100% of 4000 logged' in drifting
    assert "quiet" in quiet and "<td>—</td>" in quiet and '<td class="ece"><span class="muted">—</span></td>' in quiet


def _points(html: str, series: str = "calibrated") -> list[tuple[str, float]]:
    group = re.search(rf'<g class="series" data-series="{series}">(.*?)<polyline', html, re.S).group(1)
    return [(w, float(v)) for w, v in re.findall(r'data-window="([^"]+)" data-ece="([^"]+)"', group)]


@pytest.mark.parametrize("window", ["500", "2500", "day"])
def test_the_window_selector_changes_the_charts_points_to_the_apis_windows(api, window):
    client, _ = api
    html = client.get(f"/ui/calibrators/{NAME}/online", params={"window": window}).text
    # the chart's points are the estimates, which the bootstrap does not change (bootstrap=0: no intervals)
    answer = _ok(client.get(f"/v1/calibrators/{NAME}/quality", params={"window": window, "bootstrap": 0}))
    for series in ("calibrated", "uncalibrated"):
        assert _points(html, series) == [(w["window"], w[series]["ece"]["estimate"]) for w in answer["windows"]]
    assert f'<strong aria-current="true">{"per day" if window == "day" else window + " rows"}</strong>' in html
    alarm = _ok(client.get(f"/v1/calibrators/{NAME}/alarms"))["alarms"][0]
    row = alarm["alarm_rows"] - 1            # every observation before 4000 is v1's labelled feedback, in order
    size = 500 if window == "500" else 2500
    expected = (answer["windows"][0]["window"] if window == "day" else
                f"rows {row // size * size}-{(row // size + 1) * size - 1}")
    assert 2000 <= row < 4000
    assert f'<g class="alarm-marker" data-window="{expected}" data-version="1" data-signal="labelled">' in html


def _counted(calls: dict, metric: str, fn):
    def counted(*args, **kwargs):
        calls[metric] = calls.get(metric, 0) + 1
        return fn(*args, **kwargs)
    return counted


def test_the_pages_compute_only_the_metrics_they_draw(api, monkeypatch):
    """The online page bootstraps only the metrics it draws (ECE in its chart and table, NLL and
    accuracy in its table); the home's sparkline reads ECE estimates only: the other metrics
    (KDE-ECE the dearest) are never computed for a view."""
    client, _ = api
    calls: dict = {}
    for metric, fn in list(quality.METRICS.items()):
        monkeypatch.setitem(quality.METRICS, metric, _counted(calls, metric, fn))
    html = client.get(f"/ui/calibrators/{NAME}/online", params={"window": "2500"}).text
    assert set(calls) == {"ece", "nll", "accuracy"}, calls
    table = re.search(r'<table id="quality">.*?</table>', html, re.S).group(0)
    assert table.count('<span class="muted">[') == 2 * 4                 # 2 windows x 4 interval cells
    assert "100 bootstrap resamples" in table
    calls.clear()
    assert client.get("/ui").status_code == 200
    assert set(calls) == {"ece"}, calls


def test_a_metrics_interval_is_the_same_whichever_others_are_asked():
    _, logits, labels = load_split("cifar10_resnet50_cross_entropy", "test")
    probs = np.exp(logits[:400] - logits[:400].max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    everything = quality.metrics_of(probs, labels[:400], quality.QualityQuery(bootstrap=30))
    some = quality.metrics_of(probs, labels[:400], quality.QualityQuery(bootstrap=30, metrics=("nll", "ece"),
                                                                          intervals=("nll",)))
    assert some == {"nll": everything["nll"], "ece": {**everything["ece"], "low": None, "high": None}}
    assert everything["ece"]["low"] < everything["ece"]["estimate"] < everything["ece"]["high"]
    with pytest.raises(InvalidInput, match="unknown metrics"):
        quality.quality(None, NAME, quality.QualityQuery(metrics=("ece", "auc")))


def test_the_default_window_and_the_e_value_trajectory_replayed_to_the_stored_e_value(api, online_page):
    client, _ = api
    html = online_page
    assert '<strong aria-current="true">500 rows</strong>' in html
    assert 'href="/ui/calibrators/drifting/online?window=day"' in html
    monitors = _ok(client.get(f"/v1/calibrators/{NAME}/alarms"))["monitors"]
    (monitor,) = [m for m in monitors if m["signal"] == "labelled"]
    (trajectory,) = trajectories(client.app.state.service, NAME, 200_000)
    assert trajectory["replayed_log_e"] == pytest.approx(monitor["log_e_value"], rel=1e-9, abs=1e-9)
    assert trajectory["rows"][-1] == monitor["n_rows"] == 4000 and monitor["alarm_rows"] in trajectory["rows"]
    at = trajectory["rows"].index(monitor["alarm_rows"])
    assert trajectory["log_e"][at] >= trajectory["threshold_log_e"] > max(trajectory["log_e"][:at], default=-1)
    assert f'<g class="trajectory" data-version="1" data-points="{len(trajectory["rows"])}">' in html
    cell = f'<td class="num evalue" data-value="{monitor["e_value"]!r}">{evalue(monitor["e_value"])}</td>'
    assert cell in html and '<td class="num">100</td>' in html          # 1/alpha at alpha 0.01
    assert "e+" not in re.search(r'<table id="monitors">.*?</table>', html, re.S).group(0)


def test_evaluations_are_drawn_and_the_alias_history_links_its_evidence(api, online_page):
    client, evaluation = api
    html = online_page
    eid = evaluation["id"]
    part = evaluation[evaluation["decided_on"]]
    low, high = part["confidence_sequence"]
    assert f'<g class="evaluation-interval" data-evaluation="{eid}" data-low="{low!r}" data-high="{high!r}">' in html
    assert f'<tr id="evaluation-{eid}" data-evaluation="{eid}">' in html
    assert f"v2 vs v1: {evaluation['verdict']}</text>" in html
    assert f'<a href="#evaluation-{eid}">{eid[:12]}</a>' in html
    assert f"{part['difference']:.4f} [{low:.4f}, {high:.4f}]" in html
    jobs = _ok(client.get("/v1/jobs", params={"calibrator": NAME}))["jobs"]
    assert all(f'<a href="/ui/jobs/{j["id"]}">' in html for j in jobs)


def test_empty_states_say_the_next_command(api):
    client, _ = api
    html = client.get(f"/ui/calibrators/{QUIET}/online").text
    for command in (f"calibration label {QUIET} labels.csv", f"calibration alarms {QUIET} --evaluate",
                    f"calibration evaluate {QUIET} 2 production", f"calibration alias {QUIET} production 1"):
        assert f"<code>{command}</code>" in html, command
    assert 'data-state="no labels"' in html
    for window in ("week", "0", "-5"):       # a window the quality API refuses is a 422 page, not a 500
        refused = client.get(f"/ui/calibrators/{NAME}/online", params={"window": window})
        assert refused.status_code == 422 and "window must be" in refused.text, window


def test_the_reliability_diagram_is_larger_and_its_legend_covers_no_interval_bar():
    import app.registry.reports as reports
    import calibration as cal
    from app.dashboard.svg import reliability_svg

    _, logits, labels = load_split("cifar10_resnet50_cross_entropy", "val")
    report = cal.json_safe(reports.comparison(cal.softmax(logits), cal.softmax(logits / 2.5), labels))
    svg = reliability_svg(report, "diagram")
    width = int(re.search(r'<svg [^>]*width="(\d+)"', svg).group(1))
    legend = re.search(r'<g class="legend"><rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)"', svg)
    left, top, w, h = (float(v) for v in legend.groups())
    assert width >= 900 and left + w <= width
    marks = [(float(x1), float(y1), float(y2)) for x1, y1, y2 in
             re.findall(r'<line x1="([\d.]+)" y1="([\d.]+)" x2="\1" y2="([\d.]+)" stroke="#[0-9a-f]+" '
                        r'stroke-width="1.2"/>', svg)]
    assert len(marks) == sum(c > 0 for c in report["before"]["reliability_diagram"]["count"]) + \
        sum(c > 0 for c in report["after"]["reliability_diagram"]["count"])
    for x, y1, y2 in marks:      # no interval bar passes through the legend's box
        assert not (left <= x <= left + w and min(y1, y2) <= top + h and max(y1, y2) >= top), (x, y1, y2)


def test_every_command_an_empty_state_names_is_a_command_of_the_cli_with_those_options(api):
    from typer.testing import CliRunner

    from app.dashboard.home import home_page
    from calibration_client.cli import app

    client, _ = api
    shown = client.get(f"/ui/calibrators/{QUIET}/online").text + home_page({"calibrators": []}, [])
    commands = re.findall(r"<code>calibration ([^<]+)</code>", shown)
    assert len(commands) >= 8, commands
    for command in commands:
        words = command.split()
        path = words[:2] if words[0] == "policy" else words[:1]
        said = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert said.exit_code == 0, (command, said.stdout)
        for option in (w for w in words if w.startswith("--")):
            assert option in said.stdout, (command, option)
