"""The code-tour decks: built from the live kernels, refused with a sentence when a region is gone, stepped
through in Chromium (highlights as asked, nothing overflowing 16:9), and printable."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from slide_walk import MEASURE, WALK, HEIGHT, WIDTH, highlight_problems, overflow_problems, problems

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "test-output" / "slides"


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path.name} no longer contains {old!r}: update this test"
    path.write_text(text.replace(old, new, 1))


def _open(page, html: Path) -> None:
    page.goto(html.as_uri())
    page.wait_for_function("() => window.Reveal && Reveal.isReady()")
    # No slide transitions, short morphs: the walk measures where things land, not how they move.
    page.evaluate("Reveal.configure({transition: 'none', backgroundTransition: 'none', autoAnimateDuration: 0.05})")


def _show(page, h: int, f: int) -> dict:
    page.evaluate(f"Reveal.slide({h}, 0, {f})")
    return page.evaluate(f"({MEASURE})()")


# ---- (a) a region that is missing or renamed ------------------------------------------------------------


def test_a_renamed_region_stops_the_build_with_one_sentence(kernels_copy, tmp_path):
    from course.errors import CourseError
    from course.slides.build import build
    metal = kernels_copy / "metal" / "04_double_buffer.metal"
    _edit(metal, "// region: ping_pong", "// region: ping_pong_renamed")
    _edit(metal, "// endregion: ping_pong", "// endregion: ping_pong_renamed")
    with pytest.raises(CourseError) as caught:
        build(tmp_path / "out", kernels_copy, only=["tour_metal"], pdf=False)
    message = str(caught.value)
    assert message.startswith("deck 'tour_metal' cannot be built: region 'ping_pong' is not in "
                              "kernels/metal/04_double_buffer.metal"), message
    assert "ping_pong_renamed" in message and "\n" not in message and message.endswith(".")

    # The command says the same, on one line, with exit status 2 and no traceback.
    run = subprocess.run([sys.executable, "-m", "course.slides", "tour_metal", "--no-pdf", "--kernels",
                          str(kernels_copy), "--out", str(tmp_path / "cli")], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.strip() == f"slides: {message}", run.stderr
    assert "Traceback" not in run.stdout + run.stderr


def test_a_step_whose_lines_are_gone_names_deck_region_and_step(kernels_copy, tmp_path):
    from course.errors import CourseError
    from course.slides.build import build
    _edit(kernels_copy / "metal" / "01_naive.metal", "o_row[c] = acc[c] / l;", "o_row[c] = acc[c] * (1.0f / l);")
    with pytest.raises(CourseError) as caught:
        build(tmp_path / "out", kernels_copy, only=["tour_metal"], pdf=False)
    assert str(caught.value) == ("deck 'tour_metal' cannot be built: in region 'two_passes' of "
                                 "kernels/metal/01_naive.metal, step 'O = acc / l' finds no line for /acc\\[c\\] / l/.")


# ---- (c) an edit shows up in the next build ------------------------------------------------------------


def test_an_edited_region_changes_its_slide_and_moves_its_steps(kernels_copy, tmp_path):
    from course.slides.build import build
    original = build(tmp_path / "before", kernels_copy, only=["tour_metal"], pdf=False).decks[0]
    probe = "const uint slides_probe = 0;"
    _edit(kernels_copy / "metal" / "03_tiled.metal", "    // region: tile_loop\n",
          f"    // region: tile_loop\n    {probe}\n")
    edited = build(tmp_path / "after", kernels_copy, only=["tour_metal"], pdf=False).decks[0]
    assert probe not in original.html.read_text() and probe in edited.html.read_text()

    def tile_loop(deck):
        where = "kernels/metal/03_tiled.metal · region tile_loop"
        return next(s.info for s in deck.slides if s.info.get("where") == where)

    before, after = tile_loop(original), tile_loop(edited)
    assert after["lines"] == before["lines"] + 1
    # Every step still lights the same code: one row further down.
    assert [s["rows"] for s in after["steps"]] == [[r + 1 for r in s["rows"]] for s in before["steps"]]


# ---- (b) every deck in Chromium ---------------------------------------------------------------------------


@pytest.mark.browser
@pytest.mark.slow
def test_every_deck_steps_through_as_asked_and_fits_16_9(deck_page, built):
    page = deck_page
    decks = built.manifest["decks"]
    names = {d["name"] for d in decks}
    assert {f"tour_{t}" for t in ("triton", "cuda", "metal")} <= names
    lessons = {path.name for path in (REPO / "solutions").iterdir() if path.name[:2].isdigit() and path.is_dir()}
    assert {n for n in names if n[:2].isdigit()} == lessons, "a deck for each lesson, and one only"
    found = []
    for deck in decks:
        _open(page, built.out / deck["html"])
        config = page.evaluate("[Reveal.getConfig().width, Reveal.getConfig().height]")
        assert config == [WIDTH, HEIGHT]
        found += problems(deck, page.evaluate(WALK, MEASURE))
    assert not found, f"{len(found)} problems:\n" + "\n".join(found[:25])

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.add_style_tag(content="* { transition: none !important; }")
    tour = built.deck("tour_metal")
    stepped = next(s for s in tour["slides"] if s["kind"] == "code" and len(s.get("steps", [])) >= 4)
    diff = next(s for s in tour["slides"] if s["kind"] == "diff")
    for slide, f, name in ((stepped, 1, "code-step"), (diff, 1, "version-diff")):
        _open(page, built.out / tour["html"])
        page.add_style_tag(content="* { transition: none !important; }")
        assert _show(page, slide["index"], f)["code"][0]["highlighted"] == slide["steps"][f]["rows"]
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))
    lesson = built.deck("03_tiling")
    figure = next(s for s in lesson["slides"] if s["kind"] == "figure")
    _open(page, built.out / lesson["html"])
    assert not _show(page, figure["index"], -1)["overflow"]
    page.screenshot(path=str(SCREENSHOTS / "figure.png"))


@pytest.mark.browser
def test_the_checks_fail_on_wrong_highlights_and_on_overflow(deck_page, built):
    """The judges of the walk are not blind: a deck that asks for other lines, a page that highlights nothing,
    and content too big for the slide are each reported."""
    page = deck_page
    tour = built.deck("tour_metal")
    slide = next(s for s in tour["slides"] if s["kind"] == "code" and len(s.get("steps", [])) >= 2)
    steps = slide["steps"]
    _open(page, built.out / tour["html"])
    seen = {f: _show(page, slide["index"], f) for f in range(-1, len(steps))}
    assert highlight_problems("here", steps, seen) == []

    asks_other_lines = [dict(s, rows=[r + 1 for r in s["rows"]]) for s in steps]
    assert highlight_problems("here", asks_other_lines, seen)
    asks_unmatched_pattern = [dict(s, patterns=[r"no line says this"]) for s in steps]
    assert highlight_problems("here", asks_unmatched_pattern, seen)
    assert highlight_problems("here", steps, {f: stop for f, stop in seen.items() if f != 1})  # a step skipped

    # reveal highlighting nothing where the deck asked for lines
    page.evaluate("document.querySelectorAll('.present tr.highlight-line')"
                  ".forEach(row => row.classList.remove('highlight-line'))")
    last = len(steps) - 1
    assert highlight_problems("here", steps, {**seen, last: _show(page, slide["index"], last)})

    # content taller and wider than the 16:9 slide, and a code line longer than its box
    assert overflow_problems("here", [seen[-1]]) == []
    page.evaluate("""() => {
        const tall = document.createElement('div');
        tall.style.height = '900px';
        Reveal.getCurrentSlide().appendChild(tall);
        const row = Reveal.getCurrentSlide().querySelector('pre.code > code .hljs-ln-code');
        row.textContent += ' '.repeat(40) + 'x'.repeat(400);
    }""")
    stop = page.evaluate(f"({MEASURE})()")
    issues = " ".join(overflow_problems("here", [stop]))
    assert re.search(r"\d+ px tall in a 720 px slide", issues) and "a code line is cut" in issues, issues


@pytest.mark.browser
def test_s_opens_the_speaker_view_with_the_kernels_own_comments(deck_page, built):
    tour = built.deck("tour_metal")
    slide = next(s for s in tour["slides"] if s.get("where") == "kernels/metal/03_tiled.metal · region tile_loop")
    _open(deck_page, built.out / tour["html"])
    deck_page.evaluate(f"Reveal.slide({slide['index']}, 0, -1)")
    with deck_page.expect_popup() as opened:
        deck_page.keyboard.press("s")
    speaker = opened.value
    try:
        notes = speaker.locator(".speaker-controls-notes")
        notes.filter(has_text="tile_loop").wait_for()
        text = notes.inner_text()
        # the step labels, and a comment that stands in the kernel file next to the barrier
        assert all(step["label"] in text for step in slide["steps"]), text
        assert "the tile is complete" in text, text
    finally:
        speaker.close()


# ---- (d) the printable PDF ------------------------------------------------------------------------------


@pytest.mark.browser
def test_a_deck_prints_to_a_pdf_with_one_page_per_slide(deck_page, built, tmp_path):
    from course.slides.pdf import print_deck
    deck = built.deck("08_capstone")
    target = tmp_path / "08_capstone.pdf"
    print_deck(deck_page, built.out / deck["html"], target)
    data = target.read_bytes()
    assert data.startswith(b"%PDF")
    assert len(data) > 50_000, f"a {len(data)}-byte PDF of {deck['slide_count']} slides with a figure is too small"
    pages = len(re.findall(rb"/Type\s*/Page\b(?!s)", data))
    assert pages == deck["slide_count"], f"{pages} pages for {deck['slide_count']} slides"


def test_without_chromium_the_build_says_so_and_keeps_the_html(monkeypatch):
    from course.slides import pdf
    monkeypatch.setattr(pdf, "chromium_path", lambda: None)
    note = pdf.print_decks([], print)
    assert note.startswith("PDFs not made: Chromium is not installed") and "the HTML decks are complete" in note
