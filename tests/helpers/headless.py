"""Debian's headless Chromium driven by Playwright, for the UI's and the docs site's browser tests: skipped
with the reason where either is missing, a failure where `.ci/run` requires them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
REQUIRE_BROWSER = "CRUCIBLE_REQUIRE_BROWSER"
"""Set to 1 (as .ci/run does) to fail, not skip, when Chromium or Playwright is missing."""


@contextmanager
def chromium() -> Iterator[Any]:
    """A launched browser, closed on exit."""
    found = (("/usr/bin/chromium", CHROMIUM.exists()), ("playwright", find_spec("playwright") is not None))
    missing = [what for what, ok in found if not ok]
    if missing:
        if os.environ.get(REQUIRE_BROWSER) == "1":
            pytest.fail(f"{REQUIRE_BROWSER}=1 but {' and '.join(missing)} missing")
        pytest.skip(f"no browser here: {' and '.join(missing)} missing")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()
