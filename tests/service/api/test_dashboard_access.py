"""The dashboard without a browser: who may read it (the read scope, which every key has, in
a header or the dashboard's cookie), what it escapes, how it answers for what does not exist,
and the SVG's numbers for a report with stored bootstrap intervals."""

from __future__ import annotations

import re

import pytest
from starlette.testclient import TestClient

import calibration as cal
from app.access import keys
from app.dashboard.routes import COOKIE
from app.dashboard.svg import reliability_svg
from app.main import create_app
from app.platform.migrate import upgrade
from app.registry.schemas import EXAMPLE_LABELS, EXAMPLE_LOGITS
from app.settings import Settings
from tests.helpers import make_reference_input

HOSTILE = '<script>alert("x")</script><img src=https://elsewhere.example/x.png>'
PAGES = ("/ui", "/ui/calibrators/demo", "/ui/calibrators/demo/versions/1", "/ui/jobs")


def fit(client, description: str | None = None, name: str = "demo"):
    body = {"method": "temperature", "logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS}
    answer = client.post(f"/v1/calibrators/{name}/versions", json={**body, "description": description})
    assert answer.status_code == 201, answer.text
    return answer.json()


@pytest.fixture
def open_client(database_url):
    """Keys off, on each database (``database_url`` is migrated already)."""
    with TestClient(create_app(Settings(database_url=database_url, job_engine="embedded"))) as client:
        yield client


@pytest.fixture
def secured(sqlite_url):
    upgrade(sqlite_url)
    app = create_app(Settings(database_url=sqlite_url, job_engine="embedded", api_keys_enabled=True,
                              api_key_cache_seconds=0))
    issued = {scope: keys.create_key(app.state.db, f"{scope} key", [scope])[1] for scope in ("read", "write")}
    with TestClient(app) as client:
        fit_answer = client.post("/v1/calibrators/demo/versions", headers={"X-API-Key": issued["write"]},
                                 json={"method": "temperature", "logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS})
        assert fit_answer.status_code == 201
        yield client, issued


def test_with_keys_off_every_page_is_open_html_with_a_policy_that_forbids_scripts(open_client):
    fit(open_client)
    for path in PAGES:
        answer = open_client.get(path)
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/html"), path
        policy = answer.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script" not in policy and "frame-ancestors 'none'" in policy
        assert answer.headers["x-content-type-options"] == "nosniff" and answer.headers["cache-control"] == "no-store"
        assert "<script" not in answer.text and not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""",
                                                               answer.text)
    assert open_client.get("/ui/login", follow_redirects=False).status_code == 303
    assert not any(path.startswith("/ui") for path in open_client.get("/openapi.json").json()["paths"])


def test_text_from_the_database_is_escaped(open_client):
    fit(open_client, description=HOSTILE)
    for path in ("/ui/calibrators/demo", "/ui/calibrators/demo/versions/1"):
        page = open_client.get(path).text
        assert "<script" not in page and "<img" not in page, path
        assert ("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"
                "&lt;img src=https://elsewhere.example/x.png&gt;") in page


def test_what_does_not_exist_is_an_html_page_with_its_status(open_client):
    fit(open_client)
    for path in ("/ui/calibrators/nothing", "/ui/calibrators/demo/versions/7", "/ui/jobs/0123456789abcdef"):
        answer = open_client.get(path)
        assert answer.status_code == 404 and answer.headers["content-type"].startswith("text/html"), path
        assert "<h1>404 Not Found</h1>" in answer.text
    answer = open_client.get("/ui/jobs?status=lost")
    assert answer.status_code == 422 and "status must be one of" in answer.text


def test_with_keys_on_the_pages_need_the_read_scope_in_a_header(secured):
    client, issued = secured
    for path in PAGES:
        refused = client.get(path)
        assert refused.status_code == 401 and 'action="/ui/login"' in refused.text, path
        assert client.get(path, headers={"X-API-Key": issued["read"]}).status_code == 200, path
        assert client.get(path, headers={"Authorization": f"Bearer {issued['read']}"}).status_code == 200, path
        assert client.get(path, headers={"X-API-Key": issued["write"]}).status_code == 200, path  # write ⊃ read
    assert client.get("/ui", headers={"X-API-Key": "cal_nonsense"}).status_code == 401


def test_a_browser_signs_in_with_a_form_and_the_key_lives_in_a_cookie_only_the_dashboard_reads(secured):
    client, issued = secured
    form = {"content-type": "application/x-www-form-urlencoded"}
    assert client.post("/ui/login", content="api_key=cal_wrong", headers=form).status_code == 401
    assert client.post("/ui/login", content="", headers=form).status_code == 401
    client.cookies.clear()
    answer = client.post("/ui/login", content=f"api_key={issued['read']}", headers=form, follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/ui"
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}={issued['read']};")
    assert all(part in cookie for part in ("HttpOnly", "Path=/ui", "SameSite=strict")), cookie
    for path in PAGES:
        assert client.get(path).status_code == 200, path           # the cookie jar sends it on /ui
    assert "Sign out" in client.get("/ui").text
    # the API does not take the cookie: a cross-site form could not use it to write or read
    sent = {"Cookie": f"{COOKIE}={issued['read']}"}
    assert client.get("/v1/calibrators", headers=sent).status_code == 401
    out = client.post("/ui/logout", follow_redirects=False)
    assert out.status_code == 303 and f'{COOKIE}=""' in out.headers["set-cookie"]
    client.cookies.clear()
    assert client.get("/ui").status_code == 401


def test_the_svg_uses_stored_bootstrap_intervals_when_the_report_has_them():
    import app.registry.reports as reports

    logits, labels = make_reference_input(n=800, k=4, seed=5)
    raw, after = cal.softmax(logits), cal.softmax(logits / 1.7)
    report = cal.json_safe(reports.comparison(raw, after, labels, bootstrap=50, seed=1))
    svg = reliability_svg(report, 'diagram of <"demo">')
    for name in ("before", "after"):
        stored = report[name]["intervals"]["ece"]
        assert cal.legend_label(name, cal.Interval(**stored)) in svg
    assert "<title id=\"reliability-title\">diagram of &lt;&quot;demo&quot;&gt;</title>" in svg
    assert svg.count('class="bin') == sum(c > 0 for c in report["before"]["reliability_diagram"]["count"]) + \
        sum(c > 0 for c in report["after"]["reliability_diagram"]["count"])


def test_the_jobs_page_reloads_itself_only_while_a_job_is_under_way():
    from app.dashboard.pages import jobs_page

    job = {"id": "0123456789abcdef", "kind": "fit", "status": "running", "percent": 42.4, "step": "fitting <x>",
           "calibrator": "demo", "result": None, "error": None, "created_at": None, "finished_at": None}
    running = jobs_page([job], None, None)
    assert '<meta http-equiv="refresh" content="3">' in running
    assert 'value="42.4"' in running and "42%" in running and "fitting &lt;x&gt;" in running
    done = jobs_page([{**job, "status": "failed", "percent": 80.0, "error": {"title": "Invalid input",
                                                                             "detail": "no <optimum>"}}], None, None)
    assert "http-equiv" not in done and "no &lt;optimum&gt;" in done and 'class="status-failed"' in done


FORM = {"content-type": "application/x-www-form-urlencoded"}


@pytest.mark.parametrize(("body", "headers", "status"), [
    ("api_key=a&b=1&c=2&d=3&e=4", FORM, 400),                        # more fields than the form has
    ("api_key=a&api_key=b", FORM, 400),                              # a repeated field
    ("api_key=a&remember=1", FORM, 400),                             # a field the form does not have
    ("api_key=%ff%fe", FORM, 400),                                   # not UTF-8 once decoded
    ("api_key", FORM, 400),                                          # not name=value
    ("api_key=" + "k" * 5000, FORM, 413),                            # larger than any key
    ('{"api_key": "a"}', {"content-type": "application/json"}, 415),
    ("api_key=a", {"content-type": "multipart/form-data; boundary=x"}, 415),
    ("api_key=a", {}, 415),
])
def test_a_malformed_sign_in_form_is_a_4xx_page(secured, body, headers, status):
    client, _ = secured
    answer = client.post("/ui/login", content=body, headers=headers, follow_redirects=False)
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("text/html") and 'action="/ui/login"' in answer.text


CROSS_SITE = [{"Origin": "https://elsewhere.example"}, {"Origin": "null"},
              {"Origin": "http://testserver.elsewhere.example"}, {"Origin": "http://testserver:8443"},
              {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
              {"Sec-Fetch-Site": "cross-site", "Origin": "http://testserver"}]
SAME_ORIGIN = [{"Origin": "http://testserver"}, {"Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"},
               {"Sec-Fetch-Site": "same-origin", "Origin": "http://testserver"}, {}]


def test_the_sign_in_form_refuses_cross_site_posts_and_takes_same_origin_ones(secured):
    """Login CSRF: a page elsewhere must not sign a browser in with the attacker's key."""
    client, issued = secured
    form = f"api_key={issued['read']}"
    for headers in CROSS_SITE:
        client.cookies.clear()
        answer = client.post("/ui/login", content=form, headers={**FORM, **headers}, follow_redirects=False)
        assert answer.status_code == 403 and "set-cookie" not in answer.headers, headers
        assert "cross-site" in answer.text, headers
    for headers in SAME_ORIGIN:
        client.cookies.clear()
        answer = client.post("/ui/login", content=form, headers={**FORM, **headers}, follow_redirects=False)
        assert answer.status_code == 303 and answer.headers["set-cookie"].startswith(f"{COOKIE}="), headers


def test_sign_out_refuses_cross_site_posts_and_malformed_forms(secured):
    client, _ = secured
    for headers in CROSS_SITE:
        answer = client.post("/ui/logout", headers=headers, follow_redirects=False)
        assert answer.status_code == 403 and "set-cookie" not in answer.headers, headers
    for body, headers, status in [("x=1", FORM, 400), ("x=1", {"content-type": "text/plain"}, 415)]:
        assert client.post("/ui/logout", content=body, headers=headers).status_code == status
    for headers in SAME_ORIGIN:
        answer = client.post("/ui/logout", headers={**FORM, **headers}, follow_redirects=False)
        assert answer.status_code == 303 and f'{COOKIE}=""' in answer.headers["set-cookie"], headers
