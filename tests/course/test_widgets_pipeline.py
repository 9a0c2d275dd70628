"""Lesson 04's pipeline explorer says how many barriers each loop has and where they come from, and its slider
labels are shown whole."""
from __future__ import annotations

import pytest

from course.models import memory_model as mm
from course.widgets import memory


@pytest.mark.parametrize("tiles", [1, 2, 6, 12])
def test_the_barrier_count_is_the_models_and_names_the_one_before_the_loop(tiles):
    one, two = mm.pipeline_timeline(tiles, 3, 4, buffers=1), mm.pipeline_timeline(tiles, 3, 4, buffers=2)
    assert len(one.barriers) == 2 * tiles and len(two.barriers) == tiles + 1
    assert memory.barrier_count(one) == f"{2 * tiles} barriers (2 per tile)"
    assert memory.barrier_count(two) == f"{tiles + 1} barriers (one before the loop, one per tile)"


def test_the_explorer_titles_and_text_count_the_barriers_of_six_tiles(monkeypatch):
    """The default drawing (6 tiles): 12 barriers with one buffer, 7 with two, and the 7 is not called one per tile;
    every slider's label is shown whole."""
    import ipywidgets as w
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    titles = []

    def show(*args, **kwargs):
        titles.append([ax.get_title() for ax in plt.gcf().axes])
        plt.close("all")
    monkeypatch.setattr(plt, "show", show)
    box = memory.pipeline_explorer()
    sliders = [c for c in box.children[0].children if isinstance(c, w.IntSlider)]
    assert [s.description for s in sliders] == ["load time", "compute time", "tiles"] and sliders[2].value == 6
    # ipywidgets gives a description 80 px and cuts a longer one ("compute t…"): these are sized to their text
    assert all(s.style.description_width == "initial" for s in sliders)
    assert titles == [["One buffer: makespan 42, 12 barriers (2 per tile)",
                       "Two buffers (ping-pong): makespan 27, 7 barriers (one before the loop, one per tile)"]]
    text = next(c for c in box.children if isinstance(c, w.HTML)).value
    assert "12 barriers (2 per tile)" in text and "7 barriers (one before the loop, one per tile)" in text
    assert "(1 per tile)" not in text + "".join(titles[0])

