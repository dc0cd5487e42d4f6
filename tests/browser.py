"""Headless Chromium for the tests that look at pages as a reader does: Debian's chromium driven
by Playwright (Playwright's own browser download cannot work here)."""

from __future__ import annotations

import shutil

import pytest

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


needs_chromium = pytest.mark.skipif(chromium_path() is None,
                                    reason="no Chromium installed (apt-get install chromium)")


def launch(playwright):
    """A headless Chromium browser of ``playwright`` (``sync_playwright()``'s)."""
    return playwright.chromium.launch(executable_path=chromium_path(), args=ARGS)
