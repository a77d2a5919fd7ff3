"""A real headless Chromium (Debian's `chromium`, installed by `make test`) driven by Playwright.

Outside CI a machine without it skips the browser tests; under CI=true its absence fails them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

CHROMIUM = shutil.which("chromium")


@contextmanager
def page() -> Iterator:
    """A fresh page (1280x900) whose console errors and page errors collect in `page.errors`."""
    if CHROMIUM is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but chromium is not installed (make test installs it with apt-get)")
        pytest.skip("chromium not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            tab = browser.new_page(viewport={"width": 1280, "height": 900})
            tab.errors = []
            tab.on("console", lambda m: m.type == "error" and tab.errors.append(m.text))
            tab.on("pageerror", lambda e: tab.errors.append(str(e)))
            yield tab
        finally:
            browser.close()
