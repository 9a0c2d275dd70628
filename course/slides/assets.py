"""reveal.js for the decks, and the course's own stylesheet.

reveal.js comes from the ``sphinx-revealjs`` wheel (a dependency of the course), which ships reveal.js 5
as static files; only those files are used, Sphinx never runs. The parts a deck needs are copied next to
the decks, so a build folder works offline, from a USB stick or a file:// URL.
"""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from course.slides.slide_errors import SlideError

__all__ = ["reveal_dir", "install_reveal", "STYLESHEET"]

# Paths inside reveal.js's folder that the decks load (fonts come with the theme).
NEEDED = ("LICENSE", "dist/reset.css", "dist/reveal.css", "dist/reveal.js", "dist/theme/white.css",
          "dist/theme/fonts/source-sans-pro", "plugin/highlight/highlight.js", "plugin/highlight/monokai.css",
          "plugin/notes/notes.js")


def reveal_dir() -> Path:
    """reveal.js's folder inside the installed sphinx-revealjs package (found without importing Sphinx)."""
    spec = importlib.util.find_spec("sphinx_revealjs")
    if spec is None or not spec.submodule_search_locations:
        raise SlideError("the slides need reveal.js from the sphinx-revealjs package, which is not installed: "
                         "run scripts/setup.sh (or `make slides`, which runs it).")
    folder = Path(next(iter(spec.submodule_search_locations))) / "_static" / "revealjs"
    if not (folder / "dist" / "reveal.js").is_file():
        raise SlideError(f"sphinx-revealjs is installed but holds no reveal.js under {folder}; reinstall it "
                         "with scripts/setup.sh.")
    return folder


def install_reveal(out: Path) -> None:
    """Copy the reveal.js files the decks use into ``out/reveal`` (again only when the source is newer)."""
    source = reveal_dir()
    for part in NEEDED:
        src, dst = source / part, out / "reveal" / part
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        elif not dst.is_file() or dst.stat().st_mtime < src.stat().st_mtime:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    (out / "course-slides.css").write_text(STYLESHEET)


# Sizes are for the 1280 × 720 presentation; reveal scales the whole slide to the screen.
STYLESHEET = """\
:root {
  --r-main-font-size: 26px;
  --r-heading-text-transform: none;
  --r-heading1-size: 52px;
  --r-heading2-size: 34px;
  --r-heading-margin: 0 0 10px 0;
  --r-block-margin: 10px;
  --r-code-font: "DejaVu Sans Mono", Menlo, Consolas, monospace;
}
.reveal .slides section { text-align: left; height: 720px; box-sizing: border-box; padding: 6px 8px; }
.reveal .slides section.title-slide, .reveal .slides section.divider { text-align: center; padding-top: 170px; }
.reveal h1, .reveal h2 { line-height: 1.15; }
.reveal .subtitle { color: #555; font-size: 28px; }
.reveal .file-list { list-style: none; margin: 24px 0 0 0; font-size: 20px; color: #444; }
.reveal .file-list code { font-size: 19px; }
.reveal .where { position: absolute; bottom: 4px; left: 8px; margin: 0; font-size: 15px; color: #777; }
.reveal .where code { font-size: 15px; }
.reveal pre.code { width: 100%; margin: 4px 0; box-shadow: none; line-height: 1.25; position: relative; }
.reveal pre.code code { max-height: none; overflow: hidden; padding: 6px 10px; box-sizing: border-box; }
.reveal pre.code .hljs-ln-numbers { padding-right: 1em; }
.reveal pre.code .hljs-ln { width: 100%; }
.reveal pre.code .hljs-ln td { line-height: 1.25; }
.reveal .hljs.has-highlights tr.highlight-line { background: rgba(255, 255, 255, 0.10); }
.reveal ol.steps { list-style: none; display: flex; flex-wrap: wrap; gap: 8px; margin: 0 0 4px 0; padding: 0;
  font-size: 17px; }
.reveal ol.steps li.step-chip { opacity: 1; visibility: inherit; border: 1px solid #9ab; border-radius: 12px;
  padding: 1px 10px; color: #345; counter-increment: step; }
.reveal ol.steps li.step-chip::before { content: counter(step) ". "; color: #89a; }
.reveal ol.steps li.step-chip.current-fragment { background: #1b6ac9; border-color: #1b6ac9; color: #fff; }
.reveal ol.steps li.step-chip.current-fragment::before { color: #cde; }
.reveal .intro .lead p { font-size: 22px; line-height: 1.4; margin: 0 0 12px 0; }
.reveal .intro .pre-line { white-space: pre; font-family: var(--r-code-font); font-size: 17px; }
.reveal .intro .more { font-size: 16px; color: #888; }
.reveal .command code { font-size: 18px; background: #f3f3f3; padding: 4px 10px; border-radius: 4px; }
.reveal .objectives, .reveal .outline { font-size: 24px; line-height: 1.35; }
.reveal .objectives li { margin-bottom: 8px; }
.reveal .outline.two-columns { columns: 2; column-gap: 40px; }
.reveal .outline li.exercise { color: #1b6ac9; }
.reveal .math { font-style: italic; font-family: "Times New Roman", serif; }
.reveal figure { margin: 0; text-align: center; }
.reveal figure img { max-width: 100%; max-height: 560px; margin: 0 auto; display: block; }
.reveal figcaption { font-size: 16px; color: #666; margin-top: 4px; }
.reveal .erratum .number { color: #b33; }
.reveal .erratum .body { font-size: 22px; line-height: 1.4; }
.reveal .erratum.long .body { font-size: 19px; }
.reveal .erratum .body code, .reveal .intro code { font-size: 0.9em; }
.reveal .fix-label { font-size: 17px; color: #2a7; margin: 8px 0 0 0; }
.reveal .ladder table { font-size: 17px; border-collapse: collapse; width: 100%; }
.reveal .ladder th, .reveal .ladder td { padding: 3px 8px; border-bottom: 1px solid #ddd; text-align: left; }
.reveal .ladder td code { font-size: 15px; }
/* On paper a code slide shows its whole region, undimmed: the step clones stay on screen only. */
html.print-pdf .reveal pre.code > code.fragment { display: none !important; }
"""
