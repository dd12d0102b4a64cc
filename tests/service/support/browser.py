"""Headless Debian Chromium driven by Playwright for the browser tests: the ``browser`` fixture (one
per module, started with the flags the developers' guide names) and ``shots``, the folder screenshots
go to (``$CALIBRATION_SCREENSHOT_DIR`` when set, else a temporary one); ``Isolated``, a page that
aborts and records every request to another host, and ``not_blank``, the check that a screenshot
shows something. Without Chromium or Playwright the tests skip, except in CI, which installs both
(.ci/run), where they fail."""

from __future__ import annotations

import os
from io import BytesIO
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


def need_a_browser():
    """Playwright's sync API, once Chromium and Playwright are known to be there."""
    if not os.access(CHROMIUM, os.X_OK):
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{CHROMIUM} is required in CI (.ci/run installs it)")
        pytest.skip(f"{CHROMIUM} is not installed")
    return pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def browser():
    sync_api = need_a_browser()
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = os.environ.get("CALIBRATION_SCREENSHOT_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        return Path(folder)
    return tmp_path_factory.mktemp("screenshots")


class Isolated:
    """A page whose requests to any host but the server's are aborted and recorded, with the
    page's script errors and console errors (a Content-Security-Policy violation is one)."""

    def __init__(self, browser, base: str):
        self.context = browser.new_context(viewport={"width": 1200, "height": 900})
        self.page = self.context.new_page()
        self.base, self.host = base, urlsplit(base).hostname
        self.elsewhere, self.loaded, self.errors = [], [], []
        self.page.route("**/*", self._route)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("console", lambda message: message.type == "error" and self.errors.append(message.text))

    def _route(self, route):
        request = route.request
        if urlsplit(request.url).hostname == self.host:
            self.loaded.append(request.url)
            route.continue_()
        else:
            self.elsewhere.append((request.resource_type, request.url))
            route.abort()

    def open(self, path: str):
        answer = self.page.goto(self.base + path, wait_until="load")
        assert answer.status == 200, (path, answer.status)
        return answer

    def cells(self, row_selector: str) -> list[str]:
        return [c.strip() for c in self.page.locator(f"{row_selector} > *").all_inner_texts()]


def not_blank(png: bytes) -> dict:
    """How much a screenshot shows: its size, distinct colours and pixel spread; a blank page
    (one colour) fails."""
    from PIL import Image

    rgb = np.asarray(Image.open(BytesIO(png)).convert("RGB"))
    # distinct colours as distinct 24-bit integers: ``np.unique(..., axis=0)`` over the float pixel rows
    # sorts millions of rows lexicographically (~2-5 CPU-s a full-page screenshot; 1-D: ~0.1 s)
    packed = (rgb[..., 0].astype(np.uint32) << 16) | (rgb[..., 1].astype(np.uint32) << 8) | rgb[..., 2]
    colours = len(np.unique(packed))
    seen = {"bytes": len(png), "colours": colours, "std": float(rgb.astype(np.float64).std())}
    assert colours > 40 and seen["std"] > 10 and len(png) > 10_000, seen
    return seen
