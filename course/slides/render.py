"""Slides as reveal.js HTML. Each function turns one piece of a deck, already read from the sources, into
``<section>`` elements plus what the tests need to know about them (steps, rows, figures).

Sizes are for reveal's 1280 × 720 presentation (16:9). Code is set in the largest font that lets its
longest line and all its lines fit; a region too long to read at the smallest font is refused, because
a slide that scrolls or shrinks to nothing is not one an instructor can present.
"""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field

from course.slides.slide_errors import SourceMissing
from course.slides.excerpt import Excerpt, Step, line_spec, match, resolve
from course.slides.sources import Erratum, Header, Lesson
from course.slides.text import esc, inline, lead, prose

__all__ = ["WIDTH", "HEIGHT", "Rendered", "code_font", "title_slide", "objectives_slide", "outline_slide",
           "intro_slide", "code_slide", "diff_slides", "morph_slides", "figure_slide", "erratum_slide",
           "ladder_slide", "divider_slide", "page"]

WIDTH, HEIGHT = 1280, 720
MAX_CODE_PX, MIN_CODE_PX = 22, 10
CHAR_EM = 0.62        # a monospace glyph's advance, in em (DejaVu Sans Mono: 0.602)
LINE_EM = 1.25        # code line height, in em (course-slides.css)
GUTTER_CHARS = 4      # line numbers and their padding
CODE_HEIGHT = 580     # px left for a code block under a title, a steps row and the file line
CODE_WIDTH = 1230


@dataclass
class Rendered:
    html: str
    info: dict = field(default_factory=dict)


def code_font(lines: list[str] | tuple[str, ...], height: int = CODE_HEIGHT) -> int:
    """The largest font size (px, at most MAX_CODE_PX) at which every one of these lines fits the code area."""
    longest = max((len(line.expandtabs(4)) for line in lines), default=1)
    by_height = height / (max(len(lines), 1) * LINE_EM + 1)
    by_width = CODE_WIDTH / ((longest + GUTTER_CHARS) * CHAR_EM)
    return int(min(MAX_CODE_PX, by_height, by_width))


def _notes(*parts: str) -> str:
    body = "".join(p for p in parts if p)
    return f"<aside class='notes'>{body}</aside>" if body else ""


def _pre(lines, language: str, steps_spec: str | None, font: int, data_id: str | None = None) -> str:
    numbers = f" data-line-numbers='{steps_spec}'" if steps_spec is not None else ""
    index = " data-fragment-index='0'" if steps_spec and "|" in steps_spec else ""
    ident = f" data-id='{data_id}'" if data_id else ""
    return (f"<pre class='code' style='font-size:{font}px'{ident}><code class='language-{language}'"
            f"{numbers}{index}>{esc(chr(10).join(lines))}</code></pre>")


def _chips(labels: list[str]) -> str:
    items = "".join(f"<li class='fragment step-chip' data-fragment-index='{i}'>{esc(label)}</li>"
                    for i, label in enumerate(labels))
    return f"<ol class='steps'>{items}</ol>"


# ---- lesson openers -----------------------------------------------------------------------------------


def title_slide(title: str, subtitle: str, files: list[str]) -> Rendered:
    listing = "".join(f"<li><code>kernels/{esc(f)}</code></li>" for f in files)
    files_html = f"<ul class='file-list'>{listing}</ul>" if files else ""
    return Rendered(f"<section class='title-slide'><h1>{inline(title)}</h1>"
                    f"<p class='subtitle'>{inline(subtitle)}</p>{files_html}</section>", {"kind": "title"})


def objectives_slide(lesson: Lesson) -> Rendered | None:
    if not lesson.objectives:
        return None
    items = "".join(f"<li>{inline(o)}</li>" for o in lesson.objectives)
    return Rendered(f"<section><h2>By the end of this lesson you can</h2><ol class='objectives'>{items}</ol>"
                    f"<p class='where'>{esc(lesson.notebook)}</p></section>", {"kind": "objectives"})


def outline_slide(lesson: Lesson) -> Rendered:
    items = "".join(f"<li class='{'exercise' if s.startswith('Exercise') else 'section'}'>{inline(s)}</li>"
                    for s in lesson.sections)
    columns = " two-columns" if len(lesson.sections) > 7 else ""
    return Rendered(f"<section><h2>The lesson, section by section</h2><ul class='outline{columns}'>{items}</ul>"
                    f"<p class='where'>headings of {esc(lesson.notebook)}</p></section>", {"kind": "outline"})


def divider_slide(title: str, subtitle: str) -> Rendered:
    return Rendered(f"<section class='divider'><h1>{inline(title)}</h1><p class='subtitle'>{inline(subtitle)}</p>"
                    "</section>", {"kind": "divider"})


# ---- kernels ----------------------------------------------------------------------------------------------


INTRO_CHARS = 1100


def intro_slide(file: str, header: Header) -> Rendered:
    """A kernel file's title and opening paragraphs; the whole header goes to the speaker notes."""
    shown, cut = lead(header.paragraphs, INTRO_CHARS)
    body = "".join(f"<p>{prose(p)}</p>" for p in shown)
    more = "<p class='more'>(the rest of the header is in the speaker notes)</p>" if cut else ""
    command = f"<p class='command'><code>{esc(header.command)}</code></p>" if header.command else ""
    notes = _notes(f"<p><b>kernels/{esc(file)}</b>, header comment:</p>",
                   *(f"<p>{prose(p)}</p>" for p in (header.title, *header.paragraphs)))
    return Rendered(f"<section class='intro'><h2>{esc(header.title)}</h2><div class='lead'>{body}{more}</div>"
                    f"{command}<p class='where'>kernels/{esc(file)}</p>{notes}</section>",
                    {"kind": "intro", "file": file})


def _step_notes(steps: list[Step], rows: list[list[int]], shown: Excerpt) -> str:
    """Speaker notes from the kernel's own comments: those above and on each step's lines, step by step, then
    whatever comments no step claimed."""
    claimed: set[int] = set()
    parts = []
    for step, step_rows in zip(steps, rows):
        said = [c for r in step_rows for c in shown.comments[r - 1]]
        claimed.update(step_rows)
        trailing = [shown.lines[r - 1].split("//", 1)[1].strip() for r in step_rows if "//" in shown.lines[r - 1]]
        trailing += [shown.lines[r - 1].split("  # ", 1)[1].strip() for r in step_rows if "  # " in shown.lines[r - 1]]
        text = " ".join(said + trailing)
        parts.append(f"<li><b>{esc(step.label)}</b>{': ' + esc(text) if text else ''}</li>")
    rest = [c for i, cs in enumerate(shown.comments, 1) if i not in claimed for c in cs] + list(shown.trailing)
    notes = f"<ol>{''.join(parts)}</ol>" if parts else ""
    if rest:
        notes += f"<p>{esc(' '.join(rest))}</p>"
    return notes


def code_slide(title: str, where: str, shown: Excerpt, language: str, steps: list[Step], python: bool) -> Rendered:
    """A region with its steps: first the whole region, then one highlight per step (reveal fragments)."""
    rows = [resolve(step, shown, python) for step in steps]
    font = code_font(shown.lines, CODE_HEIGHT if steps else CODE_HEIGHT + 36)
    if font < MIN_CODE_PX:
        raise SourceMissing(f"its {len(shown.lines)} lines of up to {max(map(len, shown.lines))} characters do not "
                            f"fit a slide at {MIN_CODE_PX} px or more (quote a smaller region)")
    spec = "|".join(["", *(line_spec(r) for r in rows)]) if steps else ""
    chips = _chips([s.label for s in steps]) if steps else ""
    notes = _notes(f"<p><b>{esc(where)}</b></p>", _step_notes(steps, rows, shown))
    info = {"kind": "code", "where": where, "lines": len(shown.lines), "font": font,
            "steps": [{"label": s.label, "rows": r, "patterns": [sel.pattern for sel in s.selectors],
                       "only_matches": all(sel.kind == "match" for sel in s.selectors)} for s, r in zip(steps, rows)]}
    return Rendered(f"<section class='code-slide'><h2>{esc(title)}</h2>{chips}"
                    f"{_pre(shown.lines, language, spec, font)}<p class='where'>{esc(where)}</p>{notes}</section>",
                    info)


DIFF_LINES = 34  # a diff page at about 13 px or more; less context, or more pages, beyond that


def _diff_pages(before: list[str], after: list[str]) -> list[list[str]]:
    """Unified diff lines (no file headers, hunks separated by "⋯"), in pages that each fit one slide."""
    for context in (3, 2, 1, 0):
        hunks, current = [], []
        for line in difflib.unified_diff(before, after, n=context, lineterm=""):
            if line.startswith(("---", "+++")):
                continue
            if line.startswith("@@"):
                if current:
                    hunks.append(current)
                current = []
                continue
            current.append(line)
        if current:
            hunks.append(current)
        if sum(len(h) + 1 for h in hunks) <= DIFF_LINES or context == 0:
            break
    pages, page = [], []
    for hunk in hunks:
        if page and len(page) + 1 + len(hunk) > DIFF_LINES:
            pages.append(page)
            page = []
        if page:
            page.append("⋯")
        page.extend(hunk[:DIFF_LINES])
    if page:
        pages.append(page)
    return pages


def diff_slides(title: str, where: str, before: Excerpt, after: Excerpt, notes: str) -> list[Rendered]:
    """What changed between two versions, as a diff with two steps: the lines that go, then the lines that come."""
    pages = _diff_pages(list(before.lines), list(after.lines))
    if not pages:
        pages = [["  (no change)"]]
    out = []
    steps = [Step("what goes", match(r"^-")), Step("what comes", match(r"^\+"))]
    for n, page in enumerate(pages, 1):
        shown = Excerpt(tuple(page), tuple(() for _ in page))
        present = [s for s in steps if any(line.startswith(s.selectors[0].pattern[-1]) for line in page)]
        rows = [resolve(s, shown, python=False) for s in present]
        font = code_font(page)
        spec = "|".join(["", *(line_spec(r) for r in rows)])
        part = f" ({n}/{len(pages)})" if len(pages) > 1 else ""
        info = {"kind": "diff", "where": where, "lines": len(page), "font": font,
                "steps": [{"label": s.label, "rows": r, "patterns": [s.selectors[0].pattern], "only_matches": True}
                          for s, r in zip(present, rows)]}
        out.append(Rendered(f"<section class='code-slide diff-slide'><h2>{esc(title)}{part}</h2>"
                            f"{_chips([s.label for s in present])}{_pre(page, 'diff', spec, font)}"
                            f"<p class='where'>{esc(where)}</p>{_notes(notes)}</section>", info))
    return out


def morph_slides(title_before: str, title_after: str, before: Excerpt, after: Excerpt, language: str,
                 data_id: str, where_before: str, where_after: str) -> list[Rendered]:
    """Two slides reveal animates between: lines the versions share glide to their new place, the others fade."""
    # One size for both, or the morph would also animate the font.
    font = min(code_font(before.lines, CODE_HEIGHT + 36), code_font(after.lines, CODE_HEIGHT + 36))
    if font < MIN_CODE_PX:
        raise SourceMissing(f"the versions ({len(before.lines)} and {len(after.lines)} lines) do not fit a slide at "
                            f"{MIN_CODE_PX} px or more; quote smaller regions")
    out = []
    for title, shown, where in ((title_before, before, where_before), (title_after, after, where_after)):
        out.append(Rendered(f"<section class='code-slide' data-auto-animate><h2>{esc(title)}</h2>"
                            f"{_pre(shown.lines, language, '', font, data_id)}<p class='where'>{esc(where)}</p>"
                            "</section>", {"kind": "morph", "where": where, "lines": len(shown.lines), "font": font,
                                           "data_id": data_id}))
    return out


def figure_slide(title: str, image: str, caption: str, notes: str) -> Rendered:
    return Rendered(f"<section class='figure-slide'><h2>{esc(title)}</h2><figure>"
                    f"<img src='{esc(image)}' alt='{esc(title)}'><figcaption>{caption}</figcaption></figure>"
                    f"{_notes(notes)}</section>",
                    {"kind": "figure", "image": image})


def erratum_slide(erratum: Erratum, fix: tuple[str, Excerpt, str] | None) -> Rendered:
    """One thing the Metal code tour got wrong, in docs/metal.md's words, and where the course does it right."""
    fix_html, info = "", {"kind": "erratum", "number": erratum.number}
    size = "long" if len(erratum.body) > 520 else "short"
    if fix:
        where, shown, language = fix
        font = min(code_font(shown.lines, 200), 16)
        fix_html = (f"<p class='fix-label'>The course instead: <code>{esc(where)}</code></p>"
                    f"{_pre(shown.lines, language, None, font)}")
        info.update(where=where, font=font)
    return Rendered(f"<section class='erratum {size}'><h2><span class='number'>{erratum.number}.</span> "
                    f"{inline(erratum.title)}</h2><p class='body'>{inline(erratum.body)}</p>{fix_html}"
                    f"<p class='where'>docs/metal.md, “What the code tour got wrong or left out”</p>"
                    f"{_notes('<p>' + inline(erratum.body) + '</p>')}</section>", info)


def ladder_slide(title: str, rows: list[list[str]], headers: list[str]) -> Rendered:
    """A table: the first column plain, file names (anything with a dot and no space) as code."""
    def cell(text: str) -> str:
        return f"<code>{esc(text)}</code>" if "." in text and " " not in text.replace(", ", ",") else esc(text)

    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell(c)}</td>" for c in row) + "</tr>" for row in rows)
    return Rendered(f"<section class='ladder'><h2>{esc(title)}</h2><table><thead><tr>{head}</tr></thead>"
                    f"<tbody>{body}</tbody></table></section>", {"kind": "ladder"})


# ---- the page --------------------------------------------------------------------------------------------


def page(title: str, sections: list[Rendered]) -> str:
    """The deck's HTML file: reveal.js and its plugins from ``reveal/`` next to it, nothing from a network."""
    config = {"width": WIDTH, "height": HEIGHT, "margin": 0.04, "center": False, "hash": True,
              "slideNumber": "c/t", "transition": "slide", "pdfSeparateFragments": False, "pdfMaxPagesPerSlide": 1,
              "autoAnimateDuration": 1.2, "highlight": {"highlightOnLoad": True}}
    body = "\n".join(s.html for s in sections)
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>{esc(title)}</title>
<link rel="stylesheet" href="reveal/dist/reset.css">
<link rel="stylesheet" href="reveal/dist/reveal.css">
<link rel="stylesheet" href="reveal/dist/theme/white.css">
<link rel="stylesheet" href="reveal/plugin/highlight/monokai.css">
<link rel="stylesheet" href="course-slides.css">
</head>
<body>
<div class="reveal"><div class="slides">
{body}
</div></div>
<script src="reveal/dist/reveal.js"></script>
<script src="reveal/plugin/highlight/highlight.js"></script>
<script src="reveal/plugin/notes/notes.js"></script>
<script>
Reveal.initialize(Object.assign({json.dumps(config)}, {{plugins: [RevealHighlight, RevealNotes]}}));
</script>
</body>
</html>
"""
