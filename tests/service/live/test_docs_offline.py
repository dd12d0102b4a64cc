"""``/docs`` and ``/redoc`` work without internet (issue #22): their pages load scripts, styles,
fonts and icons only from the service itself (``/docs-assets``, the ``fastapi-offline``
package's files), and the OpenAPI document is what it was with FastAPI's CDN pages."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from fastapi import FastAPI
from starlette.testclient import TestClient

from app.http.docs import ASSETS_DIRECTORY, ASSETS_URL
from app.main import create_app
from app.platform.migrate import upgrade
from app.settings import Settings
from tests.service.support.live import live_server

PAGES = ("/docs", "/redoc")
CONTENT_TYPES = {".js": ("text/javascript", "application/javascript"), ".css": ("text/css",),
                 ".png": ("image/png",)}


class References(HTMLParser):
    """Every URL a page makes the browser load: ``src`` and ``href`` of any tag, ReDoc's
    ``spec-url``, and ``url(...)``/``@import`` in inline styles."""

    def __init__(self):
        super().__init__()
        self.urls: list[tuple[str, str]] = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        self._in_style = tag == "style"
        for name, value in attrs:
            if name in ("src", "href", "spec-url") and value:
                self.urls.append((tag, value))

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.urls.extend(("style", url) for url in re.findall(r"""(?:url\(|@import)\s*['"]?([^'")\s;]+)""", data))


def references(html: str) -> list[tuple[str, str]]:
    parser = References()
    parser.feed(html)
    return parser.urls


@pytest.fixture
def client(sqlite_url):
    upgrade(sqlite_url)
    with TestClient(create_app(Settings(database_url=sqlite_url, job_engine="embedded"))) as test_client:
        yield test_client


@pytest.mark.parametrize("page", PAGES)
def test_the_docs_pages_reference_no_other_host(client, page):
    answer = client.get(page)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/html")
    found = references(answer.text)
    tags = {tag for tag, _ in found}
    assert "script" in tags and "link" in tags, found       # the page's script and its favicon (and CSS)
    for tag, url in found:
        parts = urlsplit(url)
        assert not parts.scheme and not parts.netloc and url.startswith("/"), (tag, url)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", answer.text, re.I)
    assert "fonts.googleapis" not in answer.text and "cdn.jsdelivr" not in answer.text


@pytest.mark.parametrize("page", PAGES)
def test_every_asset_a_docs_page_references_is_served_from_the_installed_package(client, page):
    found = [url for tag, url in references(client.get(page).text) if tag in ("script", "link")]
    assert {Path(url).suffix for url in found} >= ({".js", ".css"} if page == "/docs" else {".js"})
    for url in found:
        assert url.startswith(f"{ASSETS_URL}/"), url
        answer = client.get(url)
        assert answer.status_code == 200, url
        assert answer.headers["content-type"].split(";")[0] in CONTENT_TYPES[Path(url).suffix], url
        assert answer.content == (ASSETS_DIRECTORY / url.removeprefix(f"{ASSETS_URL}/")).read_bytes(), url
        assert len(answer.content) > 1000, url


def test_the_pages_point_at_the_openapi_document_and_the_oauth2_redirect_page(client):
    assert "url: '/openapi.json'" in client.get("/docs").text
    assert "window.location.origin + '/docs/oauth2-redirect'" in client.get("/docs").text
    assert 'spec-url="/openapi.json"' in client.get("/redoc").text
    redirect = client.get("/docs/oauth2-redirect")
    assert redirect.status_code == 200 and "OAuth2 Redirect" in redirect.text
    assert [url for _, url in references(redirect.text) if urlsplit(url).netloc] == []


def test_the_openapi_document_is_the_one_published_with_fastapis_cdn_pages(client, sqlite_url, monkeypatch):
    """The same service built with FastAPI's default pages (``docs_url``/``redoc_url`` left
    alone, nothing installed) publishes the same document, byte for byte."""
    from app.http import application, docs

    class WithCdnPages(FastAPI):
        def __init__(self, *args, docs_url=None, redoc_url=None, **kwargs):
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(application, "FastAPI", WithCdnPages)
    monkeypatch.setattr(docs, "install", lambda app: None)
    with TestClient(create_app(Settings(database_url=sqlite_url, job_engine="embedded"))) as cdn:
        assert "cdn.jsdelivr.net" in cdn.get("/docs").text          # it is FastAPI's own page
        before = cdn.get("/openapi.json")
    after = client.get("/openapi.json")
    assert after.status_code == before.status_code == 200
    assert after.content == before.content
    assert not any(path.startswith(("/docs", "/redoc")) for path in after.json()["paths"])


def test_the_docs_pages_and_assets_have_bounded_metrics_labels(client):
    for path in (*PAGES, "/docs/oauth2-redirect", f"{ASSETS_URL}/swagger-ui.css", f"{ASSETS_URL}/no-such-file.js"):
        client.get(path)
    exposed = client.get("/metrics").text
    for path in (*PAGES, "/docs/oauth2-redirect"):
        assert f'calibration_requests_total{{method="GET",route="{path}",status="200"}} 1.0' in exposed
    assert f'calibration_requests_total{{method="GET",route="{ASSETS_URL}",status="200"}} 1.0' in exposed
    assert f'calibration_requests_total{{method="GET",route="{ASSETS_URL}",status="404"}} 1.0' in exposed
    assert "no-such-file" not in exposed and 'route="unmatched"' not in exposed


def test_swagger_ui_renders_the_operations_in_a_browser_with_no_internet(sqlite_url, tmp_path, browser):
    """Headless Chromium opens /docs and /redoc on a live server with every request to another
    host aborted; Swagger UI draws the operations without asking another host for anything,
    ReDoc draws its sections. CI installs both (.ci/run: Debian's chromium; playwright is a dev
    dependency); elsewhere it skips where either is missing."""
    upgrade(sqlite_url)
    with live_server(sqlite_url, log_file=tmp_path / "server.log") as base:
        page = browser.new_page()
        try:
            elsewhere, loaded = [], []

            def only_this_server(route):
                request = route.request
                if urlsplit(request.url).hostname == "127.0.0.1":
                    loaded.append(request.url)
                    route.continue_()
                else:
                    elsewhere.append((request.resource_type, request.url))
                    route.abort()

            page.route("**/*", only_this_server)
            errors = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(f"{base}/docs", wait_until="load")
            page.wait_for_selector(".opblock", timeout=30_000)
            assert page.locator(".opblock").count() > 10
            assert page.locator('.opblock-summary-path[data-path="/v1/calibrators/{name}/versions"]').count() >= 1
            assert elsewhere == [] and errors == []
            assert any(url.endswith(f"{ASSETS_URL}/swagger-ui-bundle.js") for url in loaded)

            page.goto(f"{base}/redoc", wait_until="load")
            page.wait_for_selector("[data-section-id]", timeout=30_000)
            assert page.locator("[data-section-id]").count() > 10
            # ReDoc's script draws a "by Redocly" logo from cdn.redoc.ly: the page's policy keeps the
            # browser from even asking for it, and the image's error handler drops it (nothing broken)
            assert elsewhere == [] and errors == []
            assert "img-src 'self' data:" in page.evaluate("async () => (await fetch('/redoc')).headers"
                                                           ".get('content-security-policy')")
            assert page.locator('img[src*="redoc.ly"]').count() == 0
        finally:
            page.close()
