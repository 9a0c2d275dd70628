"""Lesson 04's widgets: silent under the grader, and their first slider redraws picture and text."""
from __future__ import annotations

import itertools

import pytest

from course.widgets import memory
from course.widgets.base import NotWhileGrading
from widget_support import first_widget, move_first_slider

BUILDERS = [memory.memory_access_explorer, memory.pipeline_explorer]






@pytest.mark.parametrize("builder", BUILDERS)
def test_while_grading_the_builders_draw_nothing(builder, monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    placeholder = builder()
    assert isinstance(placeholder, NotWhileGrading)
    assert repr(placeholder).startswith(f"({builder.__name__}: ") and "JupyterLab" in repr(placeholder)


@pytest.mark.parametrize("builder", BUILDERS)
def test_the_first_slider_redraws_the_plot_and_changes_the_text(builder, monkeypatch, shown):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    move_first_slider(builder(), shown)


def test_the_memory_explorer_draws_its_other_cases(monkeypatch, shown):
    """A float4 row-wise copy, a misaligned float4 column (a message instead of a cost), a wide padded tile."""
    import ipywidgets as w
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    box = memory.memory_access_explorer()
    pad = first_widget(box, w.IntSlider)
    vector, d = box.children[0].children[1], box.children[0].children[2]
    pattern, text = box.children[1], first_widget(box, w.HTML)
    for setting in (("row", 4, 8, 0), ("column", 4, 64, 1), ("column", 1, 128, 8)):
        pattern.value, vector.value, d.value, pad.value = setting
        expected = memory.memory_picture(pad.value, vector.value, pattern.value, d.value).summary()
        assert text.value == "<p style='max-width:60em'>" + expected.replace("\n", "<br>") + "</p>"
        assert ("Misaligned" in text.value) == (setting == ("column", 4, 64, 1))
    assert len(shown) > 3


@pytest.mark.parametrize("pattern, vector, d", list(itertools.product(("row", "column"), (1, 4), (8, 16, 32, 64, 128))))
def test_every_setting_of_the_memory_picture_is_costed_or_refused(pattern, vector, d):
    for pad in range(9):
        picture = memory.memory_picture(pad, vector, pattern, d)
        assert (picture.problem is None) == (picture.access.aligned and picture.banks is not None)
        assert len(picture.lane_floats()) == 32 and picture.summary()
        if vector == 4 and pattern == "column":
            assert (picture.problem is None) == ((d + pad) % 4 == 0)


def test_the_default_picture_is_one_that_padding_changes():
    plain, padded = memory.memory_picture(0), memory.memory_picture(1)
    assert (plain.banks.ways, padded.banks.ways) == (32, 1)
    assert plain.summary() != padded.summary()


def test_a_misaligned_float4_picture_says_why_instead_of_costing_it():
    picture = memory.memory_picture(1, vector=4, pattern="column", row_floats=64)
    assert picture.coalescing is None and picture.banks is None
    assert "misaligned" in picture.summary()
    assert memory.memory_picture(4, vector=4).banks.ways == 1
    with pytest.raises(ValueError, match="pattern"):
        memory.memory_picture(0, pattern="diagonal")
