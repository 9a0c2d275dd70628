"""Lessons 00-02 in a real browser, as a learner meets them: JupyterLab serves the notebooks, headless
Chromium runs every cell from the Run menu, and the tests check what a learner would see.

- the instructor notebook of lesson 01 runs clean: no errors or stderr, a slider that redraws its plot;
- each fresh student notebook (every answer still a stub) runs to its last cell: every widget renders,
  each test cell fails in red with "not implemented yet" and no traceback, and a demonstration that
  needs an unfinished exercise says so in one sentence;
- stale and wrong answers: a cell that stops compiling or parsing after a good run leaves nothing to
  grade (the check says which cell failed), a wrong answer gets its evidence-based hint, and the case
  with an explicit scale names the scale;
- a walk through lessons 04, 06 and 09 in one notebook: a sector count that misses the straddling case
  shows the numbers, a causal kernel that visits every key tile is told which tiles lie in the future, and
  lesson 09's hint ladder, typed as its rungs show, passes.

The notebook is copied into a temporary server root, so its outputs never land in the repository.
The screenshot is kept in test-output/browser/ for a human to look at.
"""
from __future__ import annotations

import shutil

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from autograder.release.build import find_assignments

from browser_support import (
    REPO, SCREENSHOTS, LabServer, clear_outputs, open_notebook, read_cells,
    report_on_failure, run_all_cells, wait_for_idle_kernel, wait_until_done,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LESSON01 = REPO / "solutions" / "01_naive_attention" / "01_naive_attention.ipynb"
STUDENT = {lesson: REPO / "notebooks" / lesson / f"{lesson}.ipynb" for lesson in find_assignments(REPO / "solutions")}
# Every lesson's browser test moves each widget and keeps a screenshot of the student notebook, a new lesson's
# too, except these (lesson 01's solution notebook has a test of its own).
NOT_MOVED = {"00_orientation", "01_naive_attention", "02_online_softmax"}
RUN_ALL_TIMEOUT_S = 150  # the notebook needs ~20 s of Triton interpreter; the rest is headroom


@pytest.fixture(scope="module")
def lab(chromium, tmp_path_factory):
    server = LabServer(root=tmp_path_factory.mktemp("lab-root"), state=tmp_path_factory.mktemp("lab-state"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def run_notebook(page, lab: LabServer, source, name: str):
    """Copy a notebook into the server root, open it, Run All, and return every cell's report."""
    shutil.copy(source, lab.root / name)
    n_cells = clear_outputs(lab.root / name)
    open_notebook(page, lab, name, n_cells)
    run_all_cells(page)
    return wait_until_done(page, lab, name, timeout=RUN_ALL_TIMEOUT_S)


def assert_clean_run(cells) -> None:
    problems = [c.describe() for c in cells if c.problems]
    assert not problems, "cells wrote errors or stderr:\n\n" + "\n\n".join(problems)
    not_run = [f"cell {c.number} ({c.first_line!r}) {c.prompt}" for c in cells if c.code and not c.executed]
    assert not not_run, "code cells without an execution count: " + ", ".join(not_run)


# The plot images and the text widgets of a cell, as they look now.
_PLOTS = "cell => Array.from(cell.querySelectorAll('.jp-OutputArea-output img')).map(img => img.src)"
_TEXTS = "cell => Array.from(cell.querySelectorAll('.widget-html, .widget-output')).map(t => t.innerText)"


def check_slider_redraws_plot(page, cell=None) -> None:
    """The cell's first slider (by default, the notebook's first slider) sits above a plot, and one step of the
    slider redraws the plot (and its text)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout, expect

    slider_selector = ".jupyter-widgets.widget-slider"
    if cell is None:
        cell = page.locator(".jp-Notebook .jp-Cell").filter(has=page.locator(slider_selector)).first
    cell.scroll_into_view_if_needed()
    slider = cell.locator(slider_selector).first
    expect(slider).to_be_visible()
    plot = cell.locator(".jp-OutputArea-output img").first
    expect(plot).to_be_visible()
    assert plot.evaluate("img => img.naturalWidth > 0"), "the plot image is empty"

    plots_before, texts_before = cell.evaluate(_PLOTS), cell.evaluate(_TEXTS)
    readout = slider.locator(".widget-readout")
    value_before = readout.inner_text()
    handle = slider.locator(".noUi-handle").first
    handle.scroll_into_view_if_needed()
    at_max = handle.get_attribute("aria-valuenow") == handle.get_attribute("aria-valuemax")
    handle.focus()
    handle.press("ArrowLeft" if at_max else "ArrowRight")  # one step, as a learner's keyboard would
    expect(readout).not_to_have_text(value_before)
    # the plot is redrawn by the kernel, which may need a moment
    page.wait_for_function(f"([cell, before]) => JSON.stringify(({_PLOTS})(cell)) !== JSON.stringify(before)",
                           arg=[cell.element_handle(), plots_before], timeout=60_000)
    expect(plot).to_be_visible()
    if any(t.strip() for t in texts_before):
        # The plot and the text arrive as separate widget messages, in either order: wait for the text too.
        try:
            page.wait_for_function(f"([cell, before]) => JSON.stringify(({_TEXTS})(cell)) !== JSON.stringify(before)",
                                   arg=[cell.element_handle(), texts_before], timeout=30_000)
        except PlaywrightTimeout:
            raise AssertionError("the plot changed but the text beside it did not, within 30 s") from None


def full_notebook_screenshot(page, path) -> None:
    """Scroll to the top and grow the window until the last cell fits, so the picture shows every cell."""
    hidden = page.evaluate("""() => {
        const scroller = document.querySelector('.jp-NotebookPanel .jp-WindowedPanel-outer');
        scroller.scrollTop = 0;
        const cells = scroller.querySelectorAll('.jp-Cell');
        return cells[cells.length - 1].getBoundingClientRect().bottom
             - scroller.getBoundingClientRect().bottom + 40;
    }""")
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": min(size["height"] + max(int(hidden), 0), 12_000)})
    page.wait_for_timeout(500)  # let the layout settle at the new size
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)


@pytest.mark.skipif(not LESSON01.exists(), reason=f"{LESSON01.relative_to(REPO)} is not in this checkout")
def test_lesson01_runs_in_jupyterlab(lab, page):
    with report_on_failure(page, lab, "lesson01-failure.png"):
        cells = run_notebook(page, lab, LESSON01, LESSON01.name)
        assert_clean_run(cells)
        check_slider_redraws_plot(page)
        # the widget's callback runs again on every move; it must stay quiet too
        wait_for_idle_kernel(page, lab, LESSON01.name)
        assert_clean_run(read_cells(page, LESSON01.name))
        full_notebook_screenshot(page, SCREENSHOTS / "lesson01.png")


def test_error_and_stderr_outputs_are_reported(lab, page, tmp_path):
    """The checks above must see a failing cell, or a clean run would prove nothing."""
    notebook = tmp_path / "broken.ipynb"
    nbformat.write(new_notebook(
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}},
        cells=[new_code_cell(source) for source in
               ["x = 1", "import sys\nprint('a warning', file=sys.stderr)", "1 / 0", "y = 2"]]), notebook)
    with report_on_failure(page, lab, "broken-failure.png"):
        cells = run_notebook(page, lab, notebook, "broken.ipynb")
        stderr, error = cells[1].problems, cells[2].problems
        assert [kind for kind, _ in stderr] == ["wrote to stderr"] and "a warning" in stderr[0][1]
        assert [kind for kind, _ in error] == ["raised an error"]
        assert "ZeroDivisionError: division by zero" in error[0][1]
        # Whether Run All reaches cell 4 after the error is a race between JupyterLab sending the next
        # request and the kernel aborting its queue, so nothing here depends on it.
        with pytest.raises(AssertionError, match=r"cell 3 \('1 / 0'\) raised an error"):
            assert_clean_run(cells)


def _grade_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def _is_test(cell) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return bool(meta.get("grade")) and not meta.get("solution")


def _visible_text(cell_report) -> str:
    return "\n".join(text for _, text in cell_report.problems)


@pytest.mark.parametrize("lesson", sorted(STUDENT))
def test_fresh_student_notebook_runs_all_to_the_end(lab, page, lesson):
    """Run All on the notebook as handed out: nothing stops it, every widget renders, every failure is a sentence."""
    from playwright.sync_api import expect

    source = STUDENT[lesson]
    nb = nbformat.read(source, as_version=4)
    with report_on_failure(page, lab, f"student-{lesson}-failure.png"):
        cells = run_notebook(page, lab, source, f"student-{lesson}.ipynb")
        not_run = [f"cell {c.number} ({c.first_line!r})" for c in cells if c.code and not c.executed]
        assert not not_run, "Run All stopped before these cells: " + ", ".join(not_run)
        for cell, report in zip(nb.cells, cells):
            text = _visible_text(report)
            assert "site-packages" not in text and "Warning" not in text, report.describe()
            if _is_test(cell) and "course.check" in cell.source:  # hidden-test cells hand out empty
                # a graded test cell on a stub: red, short, and it says why
                assert report.problems, f"test cell {report.number} passed on a stub"
                assert "not implemented yet" in text and "Traceback" not in text, report.describe()
                assert len(text.strip().splitlines()) <= 8, report.describe()
            elif cell.cell_type == "code" and not cell.metadata.get("nbgrader", {}).get("solution") and report.problems:
                # a demonstration that needs an unfinished exercise: one sentence, no traceback
                assert "not finished yet" in text and "Traceback" not in text, report.describe()
                assert len(text.strip().splitlines()) <= 2, report.describe()
        widget_cells = [i for i, c in enumerate(nb.cells) if "explorer()" in c.source]
        assert widget_cells, "each lesson has a widget"
        notebook_cells = page.locator(".jp-Notebook .jp-Cell")
        for i in widget_cells:
            expect(notebook_cells.nth(i).locator(".jupyter-widgets").first).to_be_visible()
        if lesson not in NOT_MOVED:  # every widget of these lessons is moved once, in the notebook a learner opens
            for i in widget_cells:
                check_slider_redraws_plot(page, notebook_cells.nth(i))
            wait_for_idle_kernel(page, lab, f"student-{lesson}.ipynb")
            full_notebook_screenshot(page, SCREENSHOTS / f"student-{lesson}.png")


def _lesson01_mistakes() -> nbformat.NotebookNode:
    """Lesson 01's student notebook with a learner's history appended: right answers that are then
    broken (a parse error, a compile error), and wrong answers with a recognisable mistake."""
    from course.kernels import read_source

    nb = nbformat.read(STUDENT["01_naive_attention"], as_version=4)
    setup = next(c for c in nb.cells if _grade_id(c) == "setup")
    right_torch = ("def attention_torch(q, k, v, scale=None):\n"
                   "    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale\n"
                   "    return torch.softmax((q @ k.T) * scale, dim=-1) @ v\n")
    right_cuda = "%%cuda naive_cuda\n" + read_source("kernels/cuda/01_naive.cu")
    steps = [
        right_torch,
        'course.check("01.attention_torch", attention_torch)',                       # 2: passes
        "def attention_torch(q, k, v, scale=None)\n    return q\n",                  # 3: does not parse
        'course.check("01.attention_torch", attention_torch)',                       # 4: says the cell failed
        right_cuda,                                                                  # 5: compiles
        right_cuda.replace("if (row >= n_q) return;", "if (row >= n_q) return"),     # 6: does not compile
        'course.check_tracks("01.naive", cuda=naive_cuda)',                          # 7: says it did not compile
        "def attention_torch(q, k, v, scale=None):\n"                                # 8: forgets the scale
        "    return torch.softmax(q @ k.T, dim=-1) @ v\n",
        'course.check("01.attention_torch", attention_torch)',                       # 9: hint names the scale
        "def attention_torch(q, k, v, scale=None):\n"                                # 10: ignores a given scale
        "    return torch.softmax((q @ k.T) / math.sqrt(q.shape[-1]), dim=-1) @ v\n",
        'course.check("01.attention_torch", attention_torch)',                       # 11: the case names scale=
    ]
    nb.cells = [setup] + [new_code_cell(text, metadata={"tags": ["raises-exception"]}) for text in steps]
    return nb


def test_stale_and_wrong_answers_say_what_happened(lab, page, tmp_path):
    notebook = tmp_path / "mistakes.ipynb"
    nbformat.write(_lesson01_mistakes(), notebook)
    with report_on_failure(page, lab, "mistakes-failure.png"):
        cells = run_notebook(page, lab, notebook, "mistakes.ipynb")
        assert all(c.executed for c in cells if c.code), [c.prompt for c in cells]
        text = {c.number: _visible_text(c) for c in cells}
        assert not cells[2].problems, text[3]
        assert "`attention_torch` is not defined: the cell that defines it failed (SyntaxError at line 1" in text[5]
        assert "did not compile" in text[8] and "Traceback" not in text[8], text[8]
        assert "hint:" in text[10] and "scale" in text[10].split("hint:")[1], text[10]
        assert "scale=0.5" in text[12], text[12]


def _cell_source(notebook, grade_id: str) -> str:
    return next(c.source for c in nbformat.read(notebook, as_version=4).cells if _grade_id(c) == grade_id)


def _wrong_answer(assignment: str, cell: str, name: str) -> str:
    """The solution cell ``cell`` of ``assignment`` with the wrong-answer corpus's entry ``name`` applied."""
    from autograder.corpora.wrong import corpus

    (entry,) = [w for w in corpus(assignment) if w.cell == cell and w.name == name]
    return entry.apply(_cell_source(REPO / "solutions" / assignment / f"{assignment}.ipynb", cell))


# Steps of _three_lessons_walkthrough, as 1-based cell numbers of the notebook it builds.
WALK = dict(sectors_check=5, causal_check=8, rung3_check=10, ladder_check=12)


def _three_lessons_walkthrough() -> nbformat.NotebookNode:
    """A learner's walk through three lessons in one notebook: lessons 04, 06 and 09's setup cells, then
    - lesson 04: a warp_sectors that counts only the sector each lane's access starts in;
    - lesson 06: the lazy causal kernel (every key tile visited, the mask hiding the future ones) in the
      Triton cell, the CUDA C cell as handed out;
    - lesson 09: the hint ladder's code typed into the stub, first rung 3's block alone, then every block
      through the last rung, each followed by the exercise's visible test cell."""
    from course.hint_ladder import LADDERS, typed_answer

    lessons = ("04_double_buffering", "06_causal_masking", "09_dataflow")
    setups = [_cell_source(STUDENT[lesson], "setup") for lesson in lessons]
    ladder = LADDERS["09.one_core_tt"]
    stub = _cell_source(STUDENT["09_dataflow"], ladder.cell.split("/")[1])

    def typed(ladder, up_to):  # the ladder's code blocks typed into the stub, as its own test types them
        return typed_answer(ladder, up_to, stub)
    steps = [
        _wrong_answer("04_double_buffering", "warp_sectors", "start-sector-only"),           # 4
        _cell_source(STUDENT["04_double_buffering"], "test_warp_sectors"),                   # 5: 16, expected 17
        _cell_source(STUDENT["06_causal_masking"], "causal_kernel_cuda"),                    # 6: the stub
        _wrong_answer("06_causal_masking", "causal_kernel_triton", "visits-every-tile"),     # 7
        _cell_source(STUDENT["06_causal_masking"], "test_causal_kernel"),                    # 8: names the tiles
        typed(ladder, 3),                                                                    # 9: one step of two
        _cell_source(STUDENT["09_dataflow"], "test_one_core_attention"),                     # 10: fails
        typed(ladder, len(ladder.rungs)),                                                    # 11: both steps
        _cell_source(STUDENT["09_dataflow"], "test_one_core_attention"),                     # 12: passes
    ]
    return new_notebook(
        metadata=nbformat.read(STUDENT["09_dataflow"], as_version=4).metadata,
        cells=[new_code_cell(text) for text in setups]
              + [new_code_cell(text, metadata={"tags": ["raises-exception"]}) for text in steps])


def _shown(page, number: int) -> str:
    """Everything cell ``number`` (1-based) shows below it, printed text and errors alike."""
    return page.locator(".jp-Notebook .jp-Cell").nth(number - 1).locator(".jp-Cell-outputArea").inner_text()


def test_a_walk_through_three_lessons_shows_what_each_answer_did(lab, page, tmp_path):
    """Lesson 04's start-sector formula fails on the straddling case, lesson 06's lazy kernel is told which tiles
    it should have skipped, and lesson 09's hint ladder, typed as shown, passes (and its rung 3 alone does not)."""
    notebook = tmp_path / "walkthrough.ipynb"
    nbformat.write(_three_lessons_walkthrough(), notebook)
    with report_on_failure(page, lab, "walkthrough-failure.png"):
        cells = run_notebook(page, lab, notebook, "walkthrough.ipynb")
        assert all(c.executed for c in cells if c.code), [c.prompt for c in cells]
        assert not any(c.problems for c in cells[:3]), "\n".join(c.describe() for c in cells[:3])
        red = {c.number: _visible_text(c) for c in cells}
        for number in WALK.values():
            assert "Traceback" not in red[number] and "site-packages" not in red[number], red[number]

        sectors = red[WALK["sectors_check"]]
        assert "warp_sectors(offset_bytes=8, stride_bytes=16, access_bytes=16) returned 16, expected 17" in sectors, \
            sectors
        assert "straddle a sector boundary" in sectors, sectors

        causal = red[WALK["causal_check"]]
        assert ("the program for query rows 0–63 loaded key tiles 2–4 (keys 64–149), which lie wholly in the "
                "future") in causal, causal
        assert "upper bound should stop at the diagonal, after key 63" in causal, causal
        assert "CUDA C: not started" in causal, causal

        rung3 = red[WALK["rung3_check"]]
        assert "09.one_core_tt" in rung3 and "the simulator stopped it" in rung3, rung3

        assert not cells[WALK["ladder_check"] - 1].problems, red[WALK["ladder_check"]]
        assert "✓ 09.one_core_tt" in _shown(page, WALK["ladder_check"]), _shown(page, WALK["ladder_check"])
