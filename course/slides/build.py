"""Build the decks: read every quoted region, render the slides, write one HTML file per deck (plus its PDF when
Chromium is there), an index page and a manifest that says what each slide shows (the tests read it).

    python -m course.slides                 # every deck into build/slides/
    python -m course.slides 03 tour_metal   # some of them
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from course.paths import KERNELS, REPO
from course.slides import decks as deck_defs
from course.slides import render
from course.slides.assets import install_reveal
from course.slides.slide_errors import SlideError, SourceMissing
from course.slides.excerpt import Excerpt, excerpt, resolve
from course.slides.figures import render_figure, widget_doc
from course.slides.model import AllRegions, Code, Deck, Divider, Errata, Intro, Ladder, Picture, Quote, Versions
from course.slides.pdf import print_decks
from course.slides.sources import KernelSources, lesson, metal_errata
from course.slides.text import esc

__all__ = ["DEFAULT_OUT", "DeckResult", "BuildResult", "build", "select"]

DEFAULT_OUT = REPO / "build" / "slides"


@dataclass
class DeckResult:
    name: str
    title: str
    html: Path
    slides: list[render.Rendered]
    pdf: Path | None = None

    def manifest(self) -> dict:
        return {"name": self.name, "title": self.title, "html": self.html.name,
                "pdf": self.pdf.name if self.pdf else None, "slide_count": len(self.slides),
                "slides": [dict(s.info, index=i) for i, s in enumerate(self.slides)]}


@dataclass
class BuildResult:
    out: Path
    decks: list[DeckResult] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    pdf_note: str | None = None
    seconds: float = 0.0


class _Renderer:
    """Turns one deck's definition into rendered slides; knows which deck it is for the error sentence."""

    def __init__(self, deck: Deck, sources: KernelSources, out: Path, cache: Path, notices: list[str]):
        self.deck, self.sources, self.out, self.cache, self.notices = deck, sources, out, cache, notices

    def fail(self, what: str, about: str = "") -> SlideError:
        where = f"in {about}, " if about else ""
        return SlideError(f"deck '{self.deck.name}' cannot be built: {where}{what}.")

    def shown(self, quote: Quote, keep_comments: bool = False) -> Excerpt:
        try:
            return excerpt(quote.read(self.sources), quote.python, keep_comments)
        except SourceMissing as error:
            raise self.fail(error.what) from None

    def slides(self) -> list[render.Rendered]:
        out = self.opening()
        for spec in self.deck.slides:
            out.extend(self.one(spec))
        return out

    def opening(self) -> list[render.Rendered]:
        if self.deck.lesson is None:
            return [render.title_slide(self.deck.title, self.deck.subtitle, list(self.deck.files))]
        try:
            info = lesson(self.deck.lesson)
        except SourceMissing as error:
            raise self.fail(error.what) from None
        files = list(self.deck.files)
        subtitle = ("the lesson's kernels, as they are in the repository today" if files
                    else "how the course works, before the first kernel")
        slides = [render.title_slide(info.title, subtitle, files), render.objectives_slide(info),
                  render.outline_slide(info)]
        return [s for s in slides if s is not None]

    def one(self, spec) -> list[render.Rendered]:
        if isinstance(spec, Intro):
            try:
                return [render.intro_slide(spec.file, self.sources.header(spec.file))]
            except SourceMissing as error:
                raise self.fail(error.what) from None
        if isinstance(spec, Code):
            return [self.code(spec)]
        if isinstance(spec, AllRegions):
            return self.all_regions(spec.file)
        if isinstance(spec, Versions):
            return self.versions(spec)
        if isinstance(spec, Picture):
            return [self.picture(spec)]
        if isinstance(spec, Errata):
            return self.errata(spec)
        if isinstance(spec, Ladder):
            return [self.ladder(spec)]
        if isinstance(spec, Divider):
            return [render.divider_slide(spec.title, spec.subtitle)]
        raise TypeError(f"unknown slide definition {spec!r}")

    def code(self, spec: Code) -> render.Rendered:
        quote = spec.quote
        shown = self.shown(quote, spec.keep_comments)
        where = f"kernels/{quote.file} · {'region' if quote.region else 'function'} {quote.name}"
        try:
            return render.code_slide(f"{quote.name}  ·  {Path(quote.file).name}", where, shown, quote.language,
                                     list(spec.steps), quote.python)
        except SourceMissing as error:
            raise self.fail(error.what, quote.what) from None

    def all_regions(self, file: str) -> list[render.Rendered]:
        self.notices.append(f"kernels/{file} has no slides of its own in course/slides/decks.py: "
                            "showing its header and every region it marks")
        out = []
        for name in self.sources.regions(file):
            try:
                out.append(self.code(Code(Quote(file, region=name))))
            except SlideError as error:
                self.notices.append(f"left out of deck '{self.deck.name}': {error}")
        return out

    def versions(self, spec: Versions) -> list[render.Rendered]:
        before = [self.shown(q) for q in spec.before]
        after = [self.shown(q) for q in spec.after]
        a, b = _joined(before), _joined(after)
        first, last = spec.before[0], spec.after[0]
        track = deck_defs.TRACK_NAMES[first.file.split("/")[0]]
        step_a, step_b = Path(first.file).name[:2], Path(last.file).name[:2]
        names_a = " + ".join(q.name for q in spec.before)
        names_b = " + ".join(q.name for q in spec.after)
        where_a = f"kernels/{first.file} · {names_a}"
        where_b = f"kernels/{last.file} · {names_b}"
        out = []
        try:
            if spec.morph:
                out += render.morph_slides(f"{track} {step_a}: {names_a}", f"{track} {step_b}: {names_b}", a, b,
                                           first.language, f"loop-{first.file.split('/')[0]}-{step_a}-{step_b}",
                                           where_a, where_b)
            if spec.diff:
                notes = (f"<p>Diff of the loop from step {step_a} ({esc(where_a)}) to step {step_b} ({esc(where_b)}), "
                         "full-line comments left out: the first step lights up what goes, the second what comes.</p>")
                out += render.diff_slides(f"{track} {step_a} → {step_b}, what changed", f"{where_a}  →  {where_b}",
                                          a, b, notes)
        except SourceMissing as error:
            raise self.fail(error.what, f"{where_a} → {where_b}") from None
        return out

    def picture(self, spec: Picture) -> render.Rendered:
        figure = spec.figure
        try:
            path = render_figure(figure, self.sources, self.out / "figures", self.cache)
            doc = widget_doc(figure.widget)
        except SourceMissing as error:
            raise self.fail(error.what, f"the picture '{figure.name}'") from None
        settings = ", ".join(f"{name} = {value}" for name, value in figure.controls) or "its default settings"
        module, builder = figure.widget.split(":")
        caption = (f"Drawn by <code>{esc(module)}.{esc(builder)}</code> at {esc(settings)}; "
                   "move the sliders in the lesson's notebook.")
        title = doc.rstrip(".")
        return render.figure_slide(title[:1].upper() + title[1:], f"figures/{path.name}", caption,
                                   f"<p>{esc(doc)}</p>")

    def errata(self, spec: Errata) -> list[render.Rendered]:
        try:
            items = metal_errata()
        except SourceMissing as error:
            raise self.fail(error.what) from None
        fixes: dict[int, Code] = {}
        for pattern, fix in spec.fixes:
            hits = [e for e in items if re.search(pattern, e.title)]
            if len(hits) != 1:
                raise self.fail(f"the erratum pattern /{pattern}/ matches {len(hits)} items of docs/metal.md, "
                                "not exactly one")
            fixes[hits[0].number] = fix
        out = []
        for item in items:
            fix = fixes.get(item.number)
            shown_fix = None
            if fix is not None:
                shown = self.shown(fix.quote, fix.keep_comments)
                try:
                    rows = resolve(fix.steps[0], shown, fix.quote.python)
                except SourceMissing as error:
                    raise self.fail(error.what, fix.quote.what) from None
                where = f"kernels/{fix.quote.file} · {fix.quote.name}"
                shown_fix = (where, _cut(shown, rows), fix.quote.language)
            out.append(render.erratum_slide(item, shown_fix))
        return out

    def ladder(self, spec: Ladder) -> render.Rendered:
        if spec.track is None:
            tracks = [t for t in deck_defs.TRACK_ORDER if (self.sources.root / t).is_dir()]
            lessons = sorted({p.name[:2] for t in tracks for p in (self.sources.root / t).glob("*") if p.is_file()})
            rows = [[n, *(", ".join(p.name for p in sorted((self.sources.root / t).glob(f"{n}_*"))) or "—"
                          for t in tracks)] for n in lessons]
            return render.ladder_slide("Every lesson's kernels", rows,
                                       ["lesson", *(deck_defs.TRACK_NAMES[t] for t in tracks)])
        rows = []
        for path in sorted(p for p in (self.sources.root / spec.track).glob("*") if p.is_file()):
            ref = f"{spec.track}/{path.name}"
            try:
                title = self.sources.header(ref).title
            except SourceMissing:
                title = ""
            rows.append([path.name[:2], path.name, title.split("·", 1)[-1].strip()])
        return render.ladder_slide(f"The {deck_defs.TRACK_NAMES[spec.track]} ladder", rows,
                                   ["lesson", "file", "what it does (its header's first line)"])


def _joined(parts: list[Excerpt]) -> Excerpt:
    lines: list[str] = []
    comments: list[tuple[str, ...]] = []
    for part in parts:
        if lines:
            lines.append("")
            comments.append(())
        lines.extend(part.lines)
        comments.extend(part.comments)
    return Excerpt(tuple(lines), tuple(comments))


def _cut(shown: Excerpt, rows: list[int]) -> Excerpt:
    """Only the rows a step chose, "⋯" where lines were skipped."""
    lines: list[str] = []
    for i, row in enumerate(rows):
        if i and row != rows[i - 1] + 1:
            lines.append("⋯")
        lines.append(shown.lines[row - 1])
    # Dedent what is left, so a few deep lines do not start halfway across the slide.
    indent = min((len(l) - len(l.lstrip()) for l in lines if l.strip() and l != "⋯"), default=0)
    lines = [l if l == "⋯" else l[indent:] for l in lines]
    return Excerpt(tuple(lines), tuple(() for _ in lines))


def select(decks: list[Deck], wanted: list[str]) -> list[Deck]:
    """Decks by name, lesson number or track: "03", "03_tiling", "tour_metal", "metal"."""
    if not wanted:
        return decks
    chosen = [d for d in decks if any(w in (d.name, d.lesson, d.name.removeprefix("tour_")) for w in wanted)]
    unknown = [w for w in wanted if not any(w in (d.name, d.lesson, d.name.removeprefix("tour_")) for d in decks)]
    if unknown:
        raise SlideError(f"no deck is called {', '.join(repr(w) for w in unknown)}; the decks are "
                         f"{', '.join(d.name for d in decks)}.")
    return chosen


def build(out: Path = DEFAULT_OUT, kernels: Path = KERNELS, only: list[str] | None = None, pdf: bool = True,
          cache: Path | None = None, log: Callable[[str], None] = lambda _line: None) -> BuildResult:
    """Build the decks into ``out`` from the kernel files under ``kernels``. Raises SlideError with one sentence
    when a deck quotes something that is not there."""
    started = time.monotonic()
    out = Path(out)
    sources = KernelSources(kernels)
    out.mkdir(parents=True, exist_ok=True)
    install_reveal(out)
    cache = Path(cache) if cache else out / ".figure-cache"
    result = BuildResult(out)
    try:
        decks = deck_defs.all_decks(sources)
    except SourceMissing as error:
        raise SlideError(f"the decks cannot be built: {error.what}.") from None
    for deck in select(decks, only or []):
        slides = _Renderer(deck, sources, out, cache, result.notices).slides()
        html = out / f"{deck.name}.html"
        html.write_text(render.page(_plain(deck), slides))
        html.with_suffix(".pdf").unlink(missing_ok=True)  # a printout of the previous version would mislead
        result.decks.append(DeckResult(deck.name, _plain(deck), html, slides))
        log(f"  {deck.name + '.html':<28} {len(slides):3d} slides")
    if pdf:
        result.pdf_note = print_decks(result.decks, log)
    entries = _merged_manifest(out, [d.manifest() for d in result.decks], [d.name for d in decks])
    (out / "manifest.json").write_text(json.dumps({"decks": entries}, indent=1))
    _write_index(out, entries)
    result.seconds = time.monotonic() - started
    return result


def _merged_manifest(out: Path, built: list[dict], order: list[str]) -> list[dict]:
    """This build's decks, plus those an earlier build left in ``out`` (building one deck keeps the others listed)."""
    try:
        earlier = json.loads((out / "manifest.json").read_text())["decks"]
    except (OSError, ValueError, KeyError):
        earlier = []
    fresh = {d["name"] for d in built}
    kept = [dict(d, pdf=d["pdf"] if d.get("pdf") and (out / d["pdf"]).is_file() else None) for d in earlier
            if d.get("name") not in fresh and (out / d.get("html", "")).is_file()]
    rank = {name: i for i, name in enumerate(order)}
    return sorted(built + kept, key=lambda d: rank.get(d["name"], len(rank)))


def _plain(deck: Deck) -> str:
    if deck.lesson is None:
        return deck.title
    return re.sub(r"`|\$", "", lesson(deck.lesson).title)


def _write_index(out: Path, entries: list[dict]) -> None:
    def pdf_cell(deck: dict) -> str:
        return f"<a href='{esc(deck['pdf'])}'>PDF</a>" if deck.get("pdf") else "—"

    rows = "".join(f"<tr><td><a href='{esc(d['html'])}'>{esc(d['title'])}</a></td><td>{d['slide_count']}</td>"
                   f"<td>{pdf_cell(d)}</td></tr>" for d in entries)
    (out / "index.html").write_text(f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Slides: FlashAttention, from first principles</title>
<style>body {{ font-family: sans-serif; margin: 2em; }} td, th {{ padding: 4px 12px; text-align: left; }}</style>
</head><body><h1>Slides</h1>
<p>Generated from <code>kernels/</code> and <code>solutions/</code> by <code>make slides</code>. Open a deck and press
<kbd>s</kbd> for the speaker view, <kbd>f</kbd> for full screen, <kbd>Esc</kbd> for the overview.</p>
<table><tr><th>deck</th><th>slides</th><th>print</th></tr>{rows}</table></body></html>
""")
