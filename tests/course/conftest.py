"""What the widget tests share."""
from __future__ import annotations

import pytest


@pytest.fixture
def shown(monkeypatch):
    """Draw with Agg, and count the figures a widget builder shows (closing each, as the inline backend does)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figures = []

    def show(*args, **kwargs):
        figures.append(plt.gcf().number)
        plt.close("all")

    monkeypatch.setattr(plt, "show", show)
    return figures
