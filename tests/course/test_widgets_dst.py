"""Lesson 09's DST explorer: the counts it launches for, against counts worked out by hand from the rules of
course/lessons/dst.py and against the notebook's fused_block_step; the text's verdicts; and the widget contract."""
from __future__ import annotations

import pathlib

import pytest

from course.lessons import dataflow, dst
from course.widgets.base import NotWhileGrading
from course.widgets.dst import block_step, block_step_source, dst_explorer, largest_fitting_rows
from widget_support import first_widget, move_first_slider

ROOT = pathlib.Path(__file__).resolve().parents[2]
needs_simulator = pytest.mark.skipif(not dataflow.available(), reason="Tenstorrent's simulator is not installed")
SIZES = [(r, d) for r in range(1, 5) for d in range(1, 5)]


def fused_by_hand(r: int, d: int) -> int:
    """Peak of the one-store step, following course/lessons/dst.py's rules value by value (r rows, d head-dim tiles):
    Kᵀ and Q·Kᵀ; then Q·Kᵀ, the filled scale and S; then S, m and its broadcast; S, the broadcast and S − m;
    then P, l and P·V; then P·V, 1/l broadcast and O."""
    return max(r * d + r * r, 3 * r * r, 2 * r * r + r, r * r + r + r * d, 3 * r * d)


def split_by_hand(r: int, d: int) -> list[int]:
    """Each store of the split step: Q·Kᵀ (Kᵀ beside it), ·scale (the fill beside it), rowmax, exp(S − m) (the
    broadcast beside it), rowsum, P·V, P·V / l (1/l broadcast beside it); buffer blocks take no DST."""
    return [r * d + r * r, 2 * r * r, r, 2 * r * r, r, r * d, 2 * r * d]


def largest_by_hand(d: int, split: bool, bits: int, full_sync: bool) -> int:
    peak = (lambda r: max(split_by_hand(r, d))) if split else (lambda r: fused_by_hand(r, d))
    return max((r for r in range(1, 5) if peak(r) <= dst.capacity(bits, full_sync)), default=0)


@pytest.fixture
def drawn(monkeypatch):
    """Each figure the widget shows, as (bar widths, bar colours, the capacity line's x)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex
    figures = []

    def show(*args, **kwargs):
        ax = plt.gcf().axes[0]
        bars = [p for p in ax.patches if hasattr(p, "get_width")]
        figures.append(([b.get_width() for b in bars], [to_hex(b.get_facecolor()) for b in bars],
                        ax.lines[0].get_xdata()[0]))
        plt.close("all")

    monkeypatch.setattr(plt, "show", show)
    return figures


@needs_simulator
def test_the_counts_are_those_worked_out_by_hand_and_the_step_computes_attention():
    for r, d in SIZES:
        fused, split = block_step(r, d, False), block_step(r, d, True)
        assert [s.tiles for s in fused.steps] == [fused_by_hand(r, d)], (r, d)
        assert [s.tiles for s in split.steps] == split_by_hand(r, d), (r, d)
        assert fused.steps[0].stored == split.steps[-1].stored == r * d
        assert fused.error < 1e-2 and split.error < 1e-2, (r, d)
    peaks = [block_step(r, 2, False).peak for r in range(1, 5)]
    assert peaks == sorted(peaks) and len(set(peaks)) == 4  # the fused step grows with the block


@needs_simulator
def test_at_rows_2_and_d_64_the_fused_step_is_the_notebooks_and_the_split_steps_fit_in_8():
    import nbformat
    import torch
    cell = next(c for c in nbformat.read(ROOT / "solutions/09_dataflow/09_dataflow.ipynb", as_version=4).cells
                if "def fused_block_step" in c.source).source
    namespace = {"torch": torch, "dataflow": dataflow, "dst": dst, "ttl": dataflow.simulator()[0],
                 "print": lambda *a: None}
    exec(cell, namespace)
    notebook = [s.tiles for s in namespace["census"].steps.values()]
    assert notebook == [s.tiles for s in block_step(2, 2, False).steps] == [12]
    source = block_step_source(2, 2, False)
    compute = [line.strip() for line in cell.split("def compute():")[1].split("@ttl.datamovement")[0].splitlines()
               if line.strip()]
    assert len(compute) == 6 and all(line in source for line in compute)  # the with line and its five lines
    assert all(s.tiles <= dst.capacity(16, False) == 8 for s in block_step(2, 2, True).steps)


@needs_simulator
def test_the_widget_keeps_the_contract_and_draws_the_counts(monkeypatch, drawn):
    import ipywidgets as w
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    box = dst_explorer()
    slider, text, before = move_first_slider(box, drawn)
    assert slider.description == "rows" and (slider.min, slider.max) == (1, 4)
    assert "Peak: <b>12 tiles</b>" in before and "holds 8: <b>does not fit</b> (4 too many)" in before
    slider.value = 2
    widths, colours, limit = drawn[-1]
    assert widths == [12] and colours == ["#dc143c"] and limit == 8  # crimson: over the capacity line
    split = first_widget(box, w.Checkbox)
    split.value = True
    widths, colours, limit = drawn[-1]
    assert widths == split_by_hand(2, 2) and set(colours) == {"#2e8b57"} and "<b>fits</b>" in text.value


@needs_simulator
def test_the_verdict_follows_the_mode_and_says_what_would_fit(monkeypatch, drawn):
    import ipywidgets as w
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    box = dst_explorer()
    mode = [c for c in box.children[1].children if isinstance(c, w.Dropdown)][0]
    assert "<b>does not fit</b>" in first_widget(box, w.HTML).value  # 12 tiles, 16-bit half sync holds 8
    text = first_widget(box, w.HTML)
    assert ("It would fit with 1 row of tiles (6 tiles), or with splitting it into steps (at most 8 tiles a step), "
            "or with full sync (DST holds 16).") in text.value
    mode.value = (16, True)
    assert "16-bit full sync holds 16: <b>fits</b>" in text.value and "does not fit" not in text.value
    mode.value = (32, False)  # 4 tiles: fewer rows, the split, full sync (8) each fall short; split and full sync do
    assert "<b>does not fit</b>" in text.value
    assert "No single change makes it fit; split into steps and in full sync, up to 2 rows of tiles (8 tiles) do." \
        in text.value


@needs_simulator
@pytest.mark.parametrize("d, split, bits, full_sync", [(4, True, 16, False), (1, False, 16, True),
                                                      (2, True, 32, True), (4, False, 32, False)])
def test_the_largest_block_that_fits_as_the_text_states_it(monkeypatch, drawn, d, split, bits, full_sync):
    import ipywidgets as w
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    expected = largest_by_hand(d, split, bits, full_sync)
    assert expected == {(4, True): 1, (1, False): 2, (2, True): 2, (4, False): 0}[d, split]
    assert largest_fitting_rows(d, split, bits, full_sync) == expected
    box = dst_explorer()
    d_choice, mode = [c for c in box.children[0].children + box.children[1].children if isinstance(c, w.Dropdown)]
    d_choice.value, mode.value, first_widget(box, w.Checkbox).value = d, (bits, full_sync), split
    text = first_widget(box, w.HTML).value
    assert f"The largest block that fits at D = {32 * d}, {'split' if split else 'fused'}" in text
    assert (f"rows = {expected}." if expected else f"none (rows = 1 needs {fused_by_hand(1, d)} tiles).") in text


def test_while_grading_it_draws_nothing(monkeypatch):
    import course.grading.recording
    monkeypatch.setattr(course.grading.recording, "autograding", lambda: True)
    assert isinstance(dst_explorer(), NotWhileGrading)
