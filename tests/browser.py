"""Debian's Chromium, headless, driven by Playwright: the browser of the page tests.

Playwright drives ``/usr/bin/chromium`` (``scripts/setup`` installs it with
apt); its own browser download is never used, since this machine's network
is closed. The flags keep Chromium from reaching for the network on its own
(component updates, first-run and background requests), which would hang
here. Without the binary the test is skipped, or fails under CI (``CI``
set), where ``scripts/setup`` must have installed it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
)
#: Where the page tests leave their screenshots (ignored by git).
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"


@contextmanager
def chromium() -> Iterator[Browser]:
    if not CHROMIUM.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: scripts/setup installs it (apt: chromium)")
        pytest.skip(f"{CHROMIUM} is not installed (apt: chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=list(FLAGS))
        try:
            yield browser
        finally:
            browser.close()
