"""Fixtures of the slide tests: the decks built once per session (into a temporary folder), one browser page."""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from browser_support import launch_chromium, require_browser_tools

REPO = Path(__file__).resolve().parents[2]
# Figures are cached by a hash of what they are drawn from, so sharing the build's cache is safe and spares
# each session the matplotlib work.
FIGURE_CACHE = REPO / "build" / "slides" / ".figure-cache"


@dataclass
class Built:
    out: Path
    manifest: dict

    def deck(self, name: str) -> dict:
        return next(d for d in self.manifest["decks"] if d["name"] == name)


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> Built:
    from course.slides.build import build
    out = tmp_path_factory.mktemp("slides")
    build(out, pdf=False, cache=FIGURE_CACHE)
    return Built(out, json.loads((out / "manifest.json").read_text()))


@pytest.fixture
def kernels_copy(tmp_path) -> Path:
    """A private copy of kernels/ to edit."""
    target = tmp_path / "kernels"
    shutil.copytree(REPO / "kernels", target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


@pytest.fixture(scope="module")
def deck_page():
    """One headless Chromium page at the decks' 16:9 size, reused by the browser tests of a module.

    Module scope, as the lesson browser tests' fixture: pytest ends a module's fixtures before the next
    module's tests, so two Playwright sync instances (which cannot share a thread) never overlap in a worker."""
    executable = require_browser_tools()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright, executable)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.set_default_timeout(30_000)
            yield page
        finally:
            browser.close()
