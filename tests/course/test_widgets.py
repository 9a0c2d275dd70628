"""The widgets' pure parts: what they compute is right (the pictures are checked in the browser test)."""
from __future__ import annotations

import numpy as np
import pytest

from course.widgets import online_softmax_trace


@pytest.mark.parametrize("block", [1, 3, 8, 64])
def test_online_softmax_trace_keeps_the_safe_normaliser_of_what_it_has_read(block):
    x = np.random.default_rng(1).normal(0, 3, 50) + np.linspace(0, 12, 50)
    trace = online_softmax_trace(x, block)
    assert trace[-1].seen == 50 and len(trace) == -(-50 // block)
    for step in trace:
        seen = x[: step.seen]
        assert step.m == seen.max()
        assert step.l == pytest.approx(np.exp(seen - seen.max()).sum(), rel=1e-12)
        assert 0.0 <= step.alpha <= 1.0
    assert trace[0].alpha == 0.0  # the first block rescales the empty sum


def test_forgetting_the_rescale_overcounts_when_the_max_grows():
    x = np.arange(16.0)  # the max grows with every block
    last = online_softmax_trace(x, 4)[-1]
    assert last.l_no_rescale > 1.5 * last.l


def test_trace_rejects_bad_input():
    with pytest.raises(ValueError):
        online_softmax_trace([], 4)
    with pytest.raises(ValueError):
        online_softmax_trace([1.0, 2.0], 0)


def test_while_grading_the_builders_draw_nothing(monkeypatch):
    """Under nbgrader nobody sees a picture: each builder returns a placeholder that says where to see it."""
    import course.widgets as widgets
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    for builder in (widgets.score_matrix_explorer, widgets.roofline_explorer, widgets.online_softmax_explorer):
        shown = repr(builder())
        assert shown.startswith(f"({builder.__name__}: ") and "JupyterLab" in shown
    monkeypatch.delenv("NBGRADER_EXECUTION")
    assert not isinstance(widgets.roofline_explorer(), widgets.NotWhileGrading)
