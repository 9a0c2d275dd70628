"""Fixtures the browser tests share: Chromium found once, one browser per module, a fresh page per test."""
from __future__ import annotations

import pytest

from browser_support import launch_chromium, require_browser_tools


@pytest.fixture(scope="module")
def chromium() -> str:
    return require_browser_tools()


@pytest.fixture(scope="module")
def browser(chromium):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright, chromium)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        yield page
    finally:
        context.close()
