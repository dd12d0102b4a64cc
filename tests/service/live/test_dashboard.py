"""The dashboard (``/ui``) and Swagger UI's "Try it out" in headless Chromium against a live
server (issue #22): every page shows the names and numbers the API's JSON has, screenshots are
saved and are not blank, nothing is fetched from another host, and fit then calibrate succeed
from ``/docs``. One server and one browser for the module; each test gets its own page with
every request to another host aborted and recorded.

Screenshots go to ``$CALIBRATION_SCREENSHOT_DIR`` when set, else to a pytest temporary folder."""

from __future__ import annotations

import json
import time
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest

import calibration as cal
from app.registry.schemas import EXAMPLE_LABELS, EXAMPLE_LOGITS
from tests.helpers import make_reference_input
from tests.service.support.browser import Isolated, not_blank
from tests.service.support.databases import copy_sqlite_database
from tests.service.support.live import live_server

NAME = "dash-demo"
DESCRIPTION = 'first fit <b>"bold" & co</b>'  # shown as text, never as markup
SHOWN = {"calibrators": "/ui", "versions": f"/ui/calibrators/{NAME}", "version-1": f"/ui/calibrators/{NAME}/versions/1",
         "version-2": f"/ui/calibrators/{NAME}/versions/2", "jobs": "/ui/jobs"}  # and each job's page


@pytest.fixture(scope="module")
def server(tmp_path_factory, sqlite_head):
    """A live server with two versions of one calibrator: v1 temperature scaling fitted in the
    request, v2 ``auto`` fitted as a job (so the jobs page has one and v2 a comparison), alias
    ``production`` on v1; and a comparison run as a job."""
    folder = tmp_path_factory.mktemp("dashboard")
    url = copy_sqlite_database(sqlite_head, folder / "calibration.db")
    logits, labels = make_reference_input(n=1500, k=4, seed=2)
    fit = {"logits": logits.tolist(), "labels": labels.tolist()}
    with live_server(url, log_file=folder / "server.log", migrated=True) as base, \
            httpx.Client(base_url=base, timeout=60) as api:
        assert api.post(f"/v1/calibrators/{NAME}/versions", json={**fit, "method": "temperature",
                                                                 "description": DESCRIPTION}).status_code == 201
        job = api.post(f"/v1/calibrators/{NAME}/versions", json={**fit, "method": "auto"},
                       headers={"Prefer": "respond-async"})
        assert job.status_code == 202, job.text
        deadline = time.monotonic() + 120
        while (state := api.get(f"/v1/jobs/{job.json()['id']}").json())["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, state
            time.sleep(0.2)
        assert state["status"] == "succeeded", state
        compared = api.post("/v1/compare", json={**fit, "methods": ["temperature", "vector"], "folds": 3},
                            headers={"Prefer": "respond-async"})
        assert compared.status_code == 202, compared.text
        while (state := api.get(f"/v1/jobs/{compared.json()['id']}").json())["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, state
            time.sleep(0.2)
        assert state["status"] == "succeeded", state
        assert api.put(f"/v1/calibrators/{NAME}/aliases/production", json={"version": 1}).status_code == 200
        yield base, api


@pytest.fixture
def page(browser, server):
    isolated = Isolated(browser, server[0])
    yield isolated
    isolated.context.close()


def fmt(value) -> str:
    return "—" if value is None else f"{value:.4f}"


def test_the_calibrators_page_lists_what_the_api_lists(page, server, shots):
    listed = server[1].get("/v1/calibrators").json()["calibrators"]
    page.open("/ui")
    assert page.page.locator("h1").inner_text() == "Calibrators"
    ours = next(c for c in listed if c["name"] == NAME)
    cells = page.cells(f'#calibrators tr[data-name="{NAME}"]')
    assert cells[0].split() == [NAME, str(ours["n_versions"]), "version(s)"] == [NAME, "2", "version(s)"]
    assert cells[1] == f"production → v1 latest v{ours['latest_version']}" == "production → v1 latest v2"
    assert ours["aliases"] == {"production": 1}
    assert cells[2] == "no labels no labelled rows yet"
    assert page.page.locator("#calibrators tbody tr").count() == len(listed)
    assert page.page.locator("#calibrators th[scope=col]").count() == 8
    not_blank(page.page.screenshot(path=shots / "calibrators.png", full_page=True))
    page.page.get_by_role("link", name="2 version(s)").click()
    assert page.page.url == server[0] + SHOWN["versions"]


def test_the_versions_page_shows_each_version_with_its_numbers_and_aliases(page, server, shots):
    versions = server[1].get(f"/v1/calibrators/{NAME}/versions").json()["versions"]
    page.open(SHOWN["versions"])
    assert page.page.locator("h1").inner_text() == f"Calibrator {NAME}"
    assert page.page.locator("#versions tbody tr").count() == len(versions) == 2
    for v in versions:
        row = f'#versions tr[data-version="{v["version"]}"]'
        cells = page.cells(row)
        before, after = v["report"]["before"]["metrics"]["ece"], v["report"]["after"]["metrics"]["ece"]
        assert cells[:6] == [str(v["version"]), v["method"], str(v["n_samples"]), str(v["n_classes"]),
                             fmt(before), fmt(after)]
        exact = page.page.locator(f"{row} td[data-value]").evaluate_all("cells => cells.map(c => c.dataset.value)")
        assert [float(x) for x in exact[2:4]] == [before, after]          # the exact numbers behind the shown ones
        assert cells[6] == (" ".join(v["aliases"]) or "—")
        assert cells[7] == (v["description"] or "")
    assert page.cells('#versions tr[data-version="1"]')[7] == DESCRIPTION     # text, not markup
    assert page.page.locator("#versions b").count() == 0
    not_blank(page.page.screenshot(path=shots / "versions.png", full_page=True))


@pytest.mark.parametrize("number", [1, 2])
def test_a_version_page_shows_the_stored_metrics_and_its_reliability_diagram(page, server, shots, number):
    version = server[1].get(f"/v1/calibrators/{NAME}/versions/{number}").json()
    report = version["report"]
    page.open(SHOWN[f"version-{number}"])
    assert page.page.locator("h1").inner_text() == f"{NAME} version {number}"
    for metric, before in report["before"]["metrics"].items():
        after = report["after"]["metrics"][metric]
        assert page.cells(f'#metrics tr[data-metric="{metric}"]') == [metric, fmt(before), fmt(after)], metric
    assert page.cells('#metrics tr[data-metric="calibration_gain"]')[2] == fmt(report["calibration_gain"])
    facts = dict(zip(*[iter(page.page.locator("#facts tbody td, #facts tbody th").all_inner_texts())] * 2,
                     strict=True))
    assert facts["Method"] == version["method"] and facts["Checksum"] == version["checksum"]
    assert facts["Samples"] == str(version["n_samples"]) and facts["Aliases"] == (" ".join(version["aliases"]) or "—")

    svg = page.page.locator("svg.reliability")
    assert svg.get_attribute("role") == "img"
    assert svg.locator("title").first.inner_html() == f"Reliability diagram of {NAME} version {number}"
    legend = svg.locator(".legend-entry").all_text_contents()
    for label, part in zip(("before", "after"), legend, strict=True):
        ece, bins = report[label]["metrics"]["ece"], report[label]["reliability_diagram"]
        interval = cal.ece_interval_from_bins(bins["count"], bins["mean_confidence"], bins["accuracy"])
        assert part == f"{label} (ECE {100 * ece:.2f}%) 95% CI {100 * interval.low:.2f}–{100 * interval.high:.2f}%"
    for label in ("before", "after"):
        counts = [c for c in report[label]["reliability_diagram"]["count"] if c > 0]
        drawn = svg.locator(f'g.series[data-series="{label}"] g.bin')
        assert [int(x) for x in drawn.evaluate_all("bins => bins.map(b => b.dataset.count)")] == counts
        weak = svg.locator(f'g.series[data-series="{label}"] g.bin.weak').count()
        assert weak == sum(c < 30 for c in counts)
    assert "Wilson" in page.page.locator("figcaption").inner_text()
    if version["method"] == "auto":
        candidates = report["comparison"]["methods"]
        assert page.page.locator("#comparison tbody tr").count() == len(candidates)
        for candidate in candidates:
            cells = page.cells(f'#comparison tr[data-candidate="{candidate["name"]}"]')
            assert cells[1:5] == [candidate["method"], fmt(candidate["mean"]["nll"]),
                                  fmt(candidate["mean"]["brier"]), fmt(candidate["mean"]["ece"])]
    not_blank(page.page.screenshot(path=shots / f"version-{number}.png", full_page=True))
    chart = not_blank(svg.screenshot(path=shots / f"version-{number}-diagram.png"))
    assert chart["colours"] > 40


def test_the_jobs_page_shows_status_percent_and_step(page, server, shots):
    jobs = server[1].get("/v1/jobs").json()["jobs"]
    page.open("/ui/jobs")
    assert page.page.locator("#jobs tbody tr").count() == len(jobs) == 2
    assert [job["kind"] for job in jobs] == ["compare", "fit"]                          # newest first
    for job in jobs:
        cells = page.cells(f'#jobs tr[data-job="{job["id"]}"]')
        assert cells[:4] == [job["id"], job["kind"], NAME if job["calibrator"] else "", job["status"]]
        assert job["status"] == "succeeded"
        assert cells[4] == f"{job['percent']:.0f}%" and cells[5] == job["step"]
    fit_job = next(job for job in jobs if job["kind"] == "fit")
    assert page.cells(f'#jobs tr[data-job="{fit_job["id"]}"]')[8] == f"{NAME} v{fit_job['result']['version']}"
    not_blank(page.page.screenshot(path=shots / "jobs.png", full_page=True))
    page.page.get_by_role("link", name=f"{NAME} v2").click()
    assert page.page.url == server[0] + SHOWN["version-2"]


@pytest.mark.parametrize("kind", ["fit", "compare"])
def test_a_job_page_shows_its_state_and_result(page, server, shots, kind):
    job = next(job for job in server[1].get("/v1/jobs").json()["jobs"] if job["kind"] == kind)
    page.open(f"/ui/jobs/{job['id']}")
    assert page.page.locator("h1").inner_text() == f"Job {job['id']}"
    field = {row: page.cells(f'#job tr[data-field="{row}"]')[1] for row in ("kind", "status", "progress", "step")}
    assert field == {"kind": kind, "status": job["status"], "progress": f"{job['percent']:.0f}%", "step": job["step"]}
    if kind == "fit":
        assert page.cells('#job tr[data-field="result"]')[1] == f"{NAME} v{job['result']['version']}"
    else:
        chosen = job["result"]["selection"]["chosen"]["name"]
        for candidate in job["result"]["methods"]:
            cells = page.cells(f'#comparison tr[data-candidate="{candidate["name"]}"]')
            assert cells == [candidate["name"] + (" (chosen)" if candidate["name"] == chosen else ""),
                             candidate["method"], fmt(candidate["mean"]["nll"]), fmt(candidate["mean"]["brier"]),
                             fmt(candidate["mean"]["ece"]), candidate["error"] or ""]
    not_blank(page.page.screenshot(path=shots / f"job-{kind}.png", full_page=True))


def test_no_dashboard_page_asks_another_host_for_anything(page, server):
    paths = [*SHOWN.values(), *(f"/ui/jobs/{job['id']}" for job in server[1].get("/v1/jobs").json()["jobs"])]
    for path in paths:
        answer = page.open(path)
        assert "script-src" not in answer.headers["content-security-policy"]
        assert answer.headers["content-security-policy"].startswith("default-src 'none'")
    assert page.elsewhere == [] and page.errors == []
    assert {urlsplit(url).path for url in page.loaded} == set(paths)  # the pages and nothing else


def _try_it_out(page, path: str, parameters: dict, body: dict) -> tuple[str, dict]:
    """In Swagger UI: expand the POST operation at ``path``, "Try it out", fill the path
    parameters and the JSON body, "Execute"; the status and JSON shown."""
    block = page.locator(f'.opblock-post:has(.opblock-summary-path[data-path="{path}"])').first
    block.locator(".opblock-summary").click()
    block.locator("button.try-out__btn").click()
    for name, value in parameters.items():
        block.locator(f'tr[data-param-name="{name}"] input').fill(value)
    block.locator("textarea.body-param__text").fill(json.dumps(body))
    block.locator("button.execute").click()
    status = block.locator(".live-responses-table .response .response-col_status").first
    status.wait_for(timeout=30_000)
    shown = block.locator(".live-responses-table .response-col_description pre").first.inner_text()
    return status.inner_text().strip(), json.loads(shown)


def test_try_it_out_fits_then_calibrates_from_the_docs(page, server, shots):
    page.open("/docs")
    page.page.wait_for_selector(".opblock", timeout=30_000)
    logits = EXAMPLE_LOGITS
    status, fitted = _try_it_out(page.page, "/v1/calibrators/{name}/versions", {"name": "from-docs"},
                                 {"method": "temperature", "logits": logits, "labels": EXAMPLE_LABELS})
    assert status == "201" and fitted["name"] == "from-docs" and fitted["version"] == 1, fitted
    assert server[1].get("/v1/calibrators/from-docs/versions/1").json()["checksum"] == fitted["checksum"]
    status, calibrated = _try_it_out(page.page, "/v1/calibrators/{ref}/calibrate", {"ref": "from-docs"},
                                     {"logits": logits[:2]})
    assert status == "200", calibrated
    expected = server[1].post("/v1/calibrators/from-docs/calibrate", json={"logits": logits[:2]}).json()
    assert calibrated == expected
    np.testing.assert_allclose(np.sum(calibrated["probabilities"], axis=1), 1.0, atol=1e-12)
    not_blank(page.page.screenshot(path=shots / "docs-try-it-out.png", full_page=False))
    assert page.elsewhere == [] and page.errors == []


def test_with_keys_on_a_browser_signs_in_once_and_reads_every_page(browser, migrated_sqlite_url, tmp_path, shots):
    """A server with API keys on: the dashboard answers the sign-in form, a read key typed into
    it is kept in the cookie, the pages then show, and signing out ends it."""
    from app.access import keys
    from app.platform.db import Database

    url = migrated_sqlite_url
    database = Database(url)
    try:
        read_key = keys.create_key(database, "dashboard reader", ["read"])[1]
        write_key = keys.create_key(database, "fitter", ["write"])[1]
    finally:
        database.dispose()
    with live_server(url, env={"CALIBRATION_API_KEYS_ENABLED": "true"}, log_file=tmp_path / "server.log",
                     migrated=True) as base:
        fitted = httpx.post(f"{base}/v1/calibrators/keyed/versions", headers={"X-API-Key": write_key}, timeout=30,
                            json={"method": "temperature", "logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS})
        assert fitted.status_code == 201
        isolated = Isolated(browser, base)
        try:
            page = isolated.page
            refused = page.goto(f"{base}/ui/calibrators/keyed", wait_until="load")
            assert refused.status == 401 and page.locator("h1").inner_text() == "Sign in"
            page.get_by_label("API key").fill("cal_0123456789ab_" + "A" * 43)
            page.get_by_role("button", name="Sign in").click()
            assert page.get_by_role("alert").inner_text() == "the API key is unknown or revoked"
            page.get_by_label("API key").fill(read_key)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(f"{base}/ui")
            assert page.locator('#calibrators tr[data-name="keyed"]').count() == 1
            cookie = next(c for c in isolated.context.cookies() if c["name"] == "calibration_ui_key")
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
            assert page.evaluate("document.cookie") == ""                     # no script can read it
            for path in ("/ui/calibrators/keyed", "/ui/calibrators/keyed/versions/1", "/ui/jobs"):
                assert page.goto(base + path, wait_until="load").status == 200, path
            not_blank(page.screenshot(path=shots / "signed-in-jobs.png", full_page=True))
            page.get_by_role("button", name="Sign out").click()
            page.wait_for_url(f"{base}/ui/login")
            assert page.goto(f"{base}/ui", wait_until="load").status == 401
            assert isolated.elsewhere == []
        finally:
            isolated.context.close()
        _a_form_elsewhere_cannot_sign_a_browser_in(browser, base, read_key)


def _a_form_elsewhere_cannot_sign_a_browser_in(browser, base: str, key: str) -> None:
    """Login CSRF: a page of another origin that posts the sign-in form with its own key."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_content(f'<form method="post" action="{base}/ui/login"><input name="api_key" value="{key}">'
                         '<button type="submit">go</button></form>')
        with page.expect_navigation() as navigation:
            page.get_by_role("button", name="go").click()
        assert navigation.value.status == 403 and "cross-site form posts are refused" in page.content()
        assert context.cookies() == []
    finally:
        context.close()


def test_the_online_page_shows_observations_quality_alarms_and_alias_history(page, server, shots):
    """A calibrator with logged predictions labelled later, uploads, two versions and alias moves:
    its online page shows what the API's observations, quality, alarms and alias history say."""
    api = server[1]
    name = "dash-online"
    logits, labels = make_reference_input(n=1200, k=4, seed=9)
    fit = {"method": "temperature", "logits": logits[:400].tolist(), "labels": labels[:400].tolist()}
    assert api.post(f"/v1/calibrators/{name}/versions", json=fit).status_code == 201
    assert api.put(f"/v1/calibrators/{name}/aliases/production", json={"version": 1}).status_code == 200
    assert api.put(f"/v1/calibrators/{name}/logging", json={"sample_rate": 1}).status_code == 200
    served = api.post(f"/v1/calibrators/{name}@production/calibrate", json={"logits": logits[400:800].tolist()})
    ids = served.json()["ids"]
    assert api.post(f"/v1/calibrators/{name}/labels", json={"ids": ids, "labels": labels[400:800].tolist()}).json()[
        "labelled"] == 400
    assert api.post(f"/v1/calibrators/{name}/observations", json={"logits": logits[800:].tolist(),
                                                                  "labels": labels[800:].tolist()}).status_code == 201
    assert api.post(f"/v1/calibrators/{name}/versions", json={**fit, "logits": logits[:800].tolist(),
                                                               "labels": labels[:800].tolist()}).status_code == 201
    assert api.put(f"/v1/calibrators/{name}/aliases/production", json={"version": 2}).status_code == 200
    assert api.post(f"/v1/calibrators/{name}/alarms/evaluate").status_code == 200
    assert api.post(f"/v1/calibrators/{name}/observations", json={"logits": logits[:200].tolist(),
                                                                  "labels": labels[:200].tolist()}).status_code == 201
    assert api.post(f"/v1/calibrators/{name}/evaluations", json={"challenger": 2, "champion": 1}).status_code == 201

    summary = api.get(f"/v1/calibrators/{name}/observations").json()
    quality = api.get(f"/v1/calibrators/{name}/quality", params={"window": "day", "bootstrap": 0}).json()
    alarms = api.get(f"/v1/calibrators/{name}/alarms").json()
    history = api.get(f"/v1/calibrators/{name}/aliases/production/history").json()
    page.open(f"/ui/calibrators/{name}")
    page.page.get_by_role("link", name="its online loop").click()
    page.page.wait_for_load_state("load")
    page.page.locator("nav.windows").get_by_role("link", name="per day").click()   # the window selector
    page.page.wait_for_load_state("load")
    text = " ".join(page.page.locator("main").inner_text().split())
    assert f"{summary['total_rows']} labelled rows of logits (4 classes)" in text
    assert "100% of the served rows: 400 logged, 400 labelled" in text
    shown = page.page.locator("tr[data-window]")
    assert shown.count() == len(quality["windows"]) >= 1
    for row, window in zip(shown.all(), quality["windows"], strict=True):
        ece = row.locator("td").nth(1).get_attribute("data-value")
        assert float(ece) == window["calibrated"]["ece"]["estimate"]
    assert page.page.locator("tr[data-signal]").count() == len(alarms["monitors"])
    listed = api.get(f"/v1/calibrators/{name}/evaluations").json()["evaluations"]
    assert len(listed) == 1 and page.page.locator(f'tr[data-evaluation="{listed[0]["id"]}"]').count() == 1
    assert listed[0]["verdict"] in text and listed[0]["n_rows"] == 200
    moves = [m["to_version"] for m in history["moves"]]
    assert moves == [2, 1] and "Alias production → v2" in text
    assert page.elsewhere == [] and page.errors == []
    not_blank(page.page.screenshot(path=str(shots / "online.png"), full_page=True))
