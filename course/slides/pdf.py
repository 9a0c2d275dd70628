"""Printable PDFs of the decks: reveal.js's print layout (``?print-pdf``), printed by headless Chromium through
Playwright (Debian's Chromium, the browser the test suite uses; Playwright's own browser download is not).

One page per slide, every fragment shown (for a code slide: its last highlight step).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from typing import Callable

__all__ = ["chromium_path", "missing_for_pdf", "print_decks", "print_deck"]

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SETUP_HINT = "scripts/setup.sh --test installs both"

# Ready to print: reveal has laid the slides out as pages, every image and font has loaded.
_PRINT_READY = """() => window.Reveal && Reveal.isReady()
    && document.querySelectorAll('.pdf-page').length > 0
    && Array.from(document.images).every(img => img.complete)
    && document.fonts.status === 'loaded'"""


def chromium_path() -> str | None:
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def missing_for_pdf() -> str | None:
    """Why PDFs cannot be printed here, as a sentence; None when they can."""
    missing = []
    if chromium_path() is None:
        missing.append("Chromium is not installed")
    if importlib.util.find_spec("playwright") is None:
        missing.append("the playwright package is not installed")
    if missing:
        return f"PDFs not made: {' and '.join(missing)} ({SETUP_HINT}); the HTML decks are complete."
    return None


def print_deck(page, html, pdf) -> None:
    """Print one deck's HTML file to ``pdf`` with an open Playwright page."""
    page.goto(html.resolve().as_uri() + "?print-pdf")
    page.wait_for_function(_PRINT_READY, timeout=60_000)
    page.pdf(path=str(pdf), prefer_css_page_size=True, print_background=True)


def print_decks(decks, log: Callable[[str], None]) -> str | None:
    """Print every deck next to its HTML; returns a sentence when PDFs could not be made (and why)."""
    reason = missing_for_pdf()
    if reason:
        return reason
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright
    current = None
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
            try:
                page = browser.new_page()
                for deck in decks:
                    current = deck.html.name
                    target = deck.html.with_suffix(".pdf")
                    print_deck(page, deck.html, target)
                    deck.pdf = target
                    log(f"  {target.name:<28} {target.stat().st_size // 1024:5d} KiB")
            finally:
                browser.close()
    except PlaywrightError as error:
        first_line = (str(error).strip().splitlines() or [""])[0]
        where = f" while printing {current}" if current else ""
        return f"PDFs not all made: Chromium failed{where} ({first_line}); the HTML decks are complete."
    return None
