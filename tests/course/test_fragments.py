"""Lesson 05's fragment maps: measured on the CPU runtime, each one a true map, and the runtime's own layout."""
from __future__ import annotations

import io

import numpy as np
import pytest

from course.models.fragments import FRAGMENTS, experiment_source, fragment_map, lane_cells, owner_text
from course.simt import RawModule
from widget_support import first_widget

SHAPES = {"cuda": (16, 16, 8), "metal": (8, 8, 2)}  # rows, cols, elements per lane


def runtime_layout(track: str) -> tuple[np.ndarray, np.ndarray]:
    """The layout the runtime's headers describe, written out here lane by lane."""
    rows, cols, per = SHAPES[track]
    lane_of = np.full((rows, cols), -1)
    slot_of = np.full((rows, cols), -1)
    for lane in range(32):
        for e in range(per):
            if track == "cuda":
                # simt_cuda_wmma.h: element e of lane l is element l * num_elements + e, row-major
                r, c = divmod(lane * per + e, cols)
            else:
                # simt_metal.h: lane l holds row (q & 4) + (l / 2) % 4 and columns c, c + 1,
                # c = (q & 2) * 2 + (l % 2) * 2, with q = l / 4
                q = lane // 4
                r, c = (q & 4) + (lane // 2) % 4, (q & 2) * 2 + (lane % 2) * 2 + e
            assert lane_of[r, c] == -1, "the expectation itself gives one cell to two owners"
            lane_of[r, c], slot_of[r, c] = lane, e
    return lane_of, slot_of


@pytest.mark.parametrize("track", ["cuda", "metal"])
def test_every_element_has_exactly_one_owner(track):
    rows, cols, per = SHAPES[track]
    lane, element = fragment_map(track)
    assert lane.shape == element.shape == (rows, cols)
    assert np.issubdtype(lane.dtype, np.integer) and np.issubdtype(element.dtype, np.integer)
    assert lane.min() >= 0 and lane.max() < 32 and element.min() >= 0 and element.max() < per
    # (lane, element) -> (row, col) is one-to-one and onto: each pair appears exactly once
    pairs = lane * per + element
    assert sorted(pairs.ravel().tolist()) == list(range(32 * per))
    assert np.bincount(lane.ravel(), minlength=32).tolist() == [per] * 32


@pytest.mark.parametrize("track", ["cuda", "metal"])
def test_the_measured_map_is_the_layout_the_runtime_documents(track):
    lane, element = fragment_map(track)
    want_lane, want_slot = runtime_layout(track)
    np.testing.assert_array_equal(lane, want_lane)
    np.testing.assert_array_equal(element, want_slot)


def test_the_closed_forms():
    lane, element = fragment_map("cuda")
    r, c = np.indices((16, 16))
    np.testing.assert_array_equal(lane, 2 * r + c // 8)
    np.testing.assert_array_equal(element, c % 8)
    # Metal: lane t's element i sits at row = bit1 + 2 bit2 + 4 bit4, col = i + 2 bit0 + 4 bit3
    lane, element = fragment_map("metal")
    for t in range(32):
        for i in range(2):
            row = ((t >> 1) & 1) + 2 * ((t >> 2) & 1) + 4 * ((t >> 4) & 1)
            col = i + 2 * (t & 1) + 4 * ((t >> 3) & 1)
            assert (lane[row, col], element[row, col]) == (t, i)


def test_lane_cells_lists_a_lane_in_slot_order():
    assert lane_cells("cuda", 5) == [(e, 2, 8 + e) for e in range(8)]
    assert lane_cells("metal", 9) == [(0, 0, 6), (1, 0, 7)]
    with pytest.raises(ValueError):
        lane_cells("metal", 32)


def test_the_map_is_measured_once_and_handed_out_as_copies():
    first, _ = fragment_map("metal")
    first[:] = -7
    again, _ = fragment_map("metal")
    assert again.min() == 0
    with pytest.raises(ValueError):
        fragment_map("triton")


@pytest.mark.parametrize("track", ["cuda", "metal"])
def test_the_experiment_compiles_and_runs_clean_under_the_checkers(track):
    rows, cols, _ = SHAPES[track]
    module = RawModule(code=experiment_source(track), language=track, compile_now="checked")
    owner, slot = np.full((rows, cols), -1.0, np.float32), np.full((rows, cols), -1.0, np.float32)
    module.get_function(FRAGMENTS[track].kernel)(1, 32, (owner, slot), check=("memcheck", "racecheck"),
                                                 schedule="random", seed=5)
    want_lane, want_slot = runtime_layout(track)
    np.testing.assert_array_equal(owner, want_lane)
    np.testing.assert_array_equal(slot, want_slot)


def test_the_note_says_whose_map_it_is():
    cuda, metal = owner_text("cuda"), owner_text("metal")
    assert "mma.sync" in cuda and "wmma" in cuda and "unspecified" in cuda
    assert "does not specify in the Metal Shading Language specification" in metal
    for text in (cuda, metal):
        assert "CPU runtime" in text and "may differ" in text


# --- the widget ---




def test_while_grading_the_explorer_draws_nothing(monkeypatch):
    from course.widgets.base import NotWhileGrading
    from course.widgets.fragments import fragment_explorer
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    shown = fragment_explorer()
    assert isinstance(shown, NotWhileGrading) and repr(shown).startswith("(fragment_explorer: ")


def test_moving_the_lane_slider_redraws_the_picture_and_the_text(monkeypatch):
    import ipywidgets as w
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course.widgets.fragments import fragment_explorer, lane_colours

    pictures = []

    def show():
        buffer = io.BytesIO()
        plt.gcf().savefig(buffer, format="rgba", dpi=40)
        pictures.append(buffer.getvalue())
        plt.close("all")

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setattr(plt, "show", show)
    box = fragment_explorer()
    assert isinstance(box, w.VBox)
    slider = first_widget(box, w.IntSlider)
    text = first_widget(box, w.HTML)
    assert slider.description == "lane" and (slider.min, slider.max) == (0, 31) and not slider.continuous_update
    assert slider is first_widget(box, w.ValueWidget), "the lane slider is the first control"
    assert len(pictures) == 1 and "Lane 0" in text.value and "(0, 7)" in text.value
    slider.value = 17
    assert len(pictures) == 2 and pictures[1] != pictures[0]
    assert "Lane 17" in text.value and "(8, 8)" in text.value and "(8, 15)" in text.value
    assert "may differ" in text.value
    first_widget(box, w.Dropdown).value = "metal"
    assert "Lane 17" in text.value and "(4, 2), e1 → (4, 3)" in text.value
    assert "Metal Shading Language" in text.value
    assert len({tuple(c) for c in lane_colours()}) == 32
