"""Finding the controls of a widget built in a test (the builders return nested ipywidgets boxes)."""
from __future__ import annotations


def first_widget(widget, kind):
    """The first widget of ``kind`` (a class or a tuple of classes) in a depth-first walk of ``widget``'s children."""
    if isinstance(widget, kind):
        return widget
    for child in getattr(widget, "children", ()):
        found = first_widget(child, kind)
        if found is not None:
            return found
    return None


def move_first_slider(box, shown):
    """The contract every lesson widget keeps (the browser test relies on it): it is a VBox drawn once when
    built, its first control is an IntSlider that waits for release, moving it redraws the plot and changes
    the text, and both ends of its range draw. Returns (slider, text widget, the text before the move)."""
    import ipywidgets as w
    assert isinstance(box, w.VBox)
    assert len(shown) == 1, "the widget draws once when it is built"
    slider, text = first_widget(box, w.IntSlider), first_widget(box, w.HTML)
    assert slider is not None and not slider.continuous_update
    controls = (w.IntSlider, w.FloatSlider, w.Dropdown, w.ToggleButtons, w.Checkbox)
    assert first_widget(box, controls) is slider, "the slider comes first"
    before = text.value
    slider.value = slider.value + slider.step if slider.value < slider.max else slider.value - slider.step
    assert len(shown) == 2 and text.value != before
    for value in (slider.min, slider.max):  # both ends draw without error
        slider.value = value
    return slider, text, before
