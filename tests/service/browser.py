"""Headless Debian Chromium driven by Playwright for the browser tests: the ``browser`` fixture (one
per module, started with the flags the developers' guide names) and ``shots``, the folder screenshots
go to (``$CALIBRATION_SCREENSHOT_DIR`` when set, else a temporary one). Without Chromium or
Playwright the tests skip, except in CI, which installs both (.ci/run), where they fail."""

from __future__ import annotations

import os
from pathlib import Path

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
