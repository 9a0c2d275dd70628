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
