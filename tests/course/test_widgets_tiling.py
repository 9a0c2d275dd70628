"""Lesson 03's tiling widget: the replayed query tile ends at softmax(S)V, and the byte counts are right."""
from __future__ import annotations

import math

import numpy as np
import pytest

from course.models import roofline
from course.widgets.base import NotWhileGrading
from course.models.roofline import tiled_kernel_bytes
from course.paths import REPO
from course.widgets.tiling import hbm_bytes, tiling_explorer, tiling_inputs, tiling_trace


def direct(n_q, n_k, d, seed, rows):
    """softmax(Q Kᵀ / √d) V and the row log-sum-exp of the given query rows, all at once in float64."""
    q, k, v = tiling_inputs(n_q, n_k, d, seed)
    s = q[rows[0]:rows[1]] @ k.T / math.sqrt(d)
    peak = s.max(axis=1, keepdims=True)
    e = np.exp(s - peak)
    return s, e @ v / e.sum(axis=1, keepdims=True), peak[:, 0] + np.log(e.sum(axis=1))


@pytest.mark.parametrize("n_q, n_k, block_m, block_n, query_tile", [
    (64, 128, 16, 16, 0),
    (64, 128, 16, 16, 3),
    (64, 128, 24, 24, 2),    # neither block divides N: a short last query tile and a short last key tile
    (50, 77, 8, 10, 6),
    (10, 33, 16, 7, 0),      # one query tile bigger than all the queries
    (32, 40, 1, 1, 5),       # one row, one key at a time
    (32, 40, 32, 64, 0),     # a single key tile holds every key
])
def test_trace_ends_at_softmax_v_and_its_logsumexp(n_q, n_k, block_m, block_n, query_tile):
    trace = tiling_trace(n_q, n_k, block_m, block_n, d=8, seed=3, query_tile=query_tile)
    rows = (query_tile * block_m, min(n_q, (query_tile + 1) * block_m))
    s, o, lse = direct(n_q, n_k, 8, 3, rows)
    assert len(trace) == -(-n_k // block_n)
    assert [step.tile for step in trace] == list(range(len(trace)))
    assert all(step.rows == rows and step.n_tiles == len(trace) for step in trace)
    assert trace[-1].keys[1] == n_k and all(a.keys[1] == b.keys[0] for a, b in zip(trace, trace[1:]))
    last = trace[-1]
    np.testing.assert_allclose(last.acc / last.l[:, None], o, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(last.o, o, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(last.lse, lse, rtol=1e-13)
    np.testing.assert_allclose(last.share, 1.0, rtol=1e-12)
    for step in trace:  # after every step the state is exactly that of the keys read so far
        seen = s[:, : step.keys[1]]
        np.testing.assert_array_equal(step.m, seen.max(axis=1))
        np.testing.assert_allclose(step.l, np.exp(seen - step.m[:, None]).sum(axis=1), rtol=1e-12)


@pytest.mark.parametrize("block_n", [1, 5, 16, 24, 200])
def test_alpha_m_and_share_behave(block_n):
    trace = tiling_trace(64, 128, 16, block_n, query_tile=1)
    np.testing.assert_array_equal(trace[0].alpha, 0.0)  # the first tile rescales the empty sum
    for before, after in zip(trace, trace[1:]):
        assert np.all((0.0 <= after.alpha) & (after.alpha <= 1.0))
        assert np.all(after.m >= before.m)
        np.testing.assert_allclose(after.alpha, np.exp(before.m - after.m), rtol=1e-15)
        assert np.all(after.share >= before.share - 1e-15)
    assert all(np.all((step.share > 0) & (step.share <= 1 + 1e-12)) for step in trace)


def test_the_scores_drift_up_so_the_rescale_has_work_to_do():
    trace = tiling_trace()  # the widget's defaults
    rescaled = [float((step.alpha < 0.99).mean()) for step in trace[1:]]
    assert min(rescaled) > 0.2 and np.mean(rescaled) > 0.5
    assert trace[0].share.max() < 0.01  # the first key tile carries almost none of the weight


def test_trace_states_are_read_only():
    step = tiling_trace(16, 16, 8, 8)[0]
    with pytest.raises(ValueError):
        step.m[0] = 0.0
    with pytest.raises(AttributeError):
        step.tile = 3


@pytest.mark.parametrize("kwargs", [dict(block_m=0), dict(block_n=0), dict(block_n=-4), dict(n_q=0), dict(n_k=0),
                                    dict(d=0), dict(block_m=2.5), dict(query_tile=4), dict(query_tile=-1)])
def test_trace_rejects_bad_input_with_a_sentence(kwargs):
    with pytest.raises(ValueError, match=r"^[a-z_]+ must be .+\.$"):
        tiling_trace(**{**dict(n_q=64, n_k=128, block_m=16, block_n=16), **kwargs})


def test_tiled_bytes_by_hand():
    # n = 4, d = 2, fp16, BLOCK_M = 2: Q 4·2·2 = 16, K and V 2 tiles × 2 × 4·2·2 = 64, O 16, LSE 4·4 = 16.
    assert tiled_kernel_bytes(4, 4, 2, 2, 2) == 112
    # Five queries in tiles of two are three tiles; K and V are 3 keys: Q 20, K and V 3·2·3·2·2 = 72, O 20, LSE 20.
    assert tiled_kernel_bytes(5, 3, 2, 2, 2) == 132
    counts = hbm_bytes(4, 2, 2, 2)
    assert counts == {"naive": 2 * 4 * (2 + 3 * 4 * 2) + 16, "tiled": 112, "ideal": 2 * (2 * 4 * 2 + 2 * 4 * 2)}
    assert counts["naive"] == 224 and counts["ideal"] == 64


def test_tiled_bytes_fall_as_block_m_grows():
    n, d = 4096, 64
    tiled = [hbm_bytes(n, d, 2**p, 2)["tiled"] for p in range(13)]
    assert all(a > b for a, b in zip(tiled, tiled[1:]))
    assert tiled_kernel_bytes(n, n, d, 48, 2) < tiled_kernel_bytes(n, n, d, 32, 2)


def test_tiled_bytes_sit_between_the_naive_and_the_ideal_kernel():
    n, d, b = 4096, 64, 2
    at_one, at_n = hbm_bytes(n, d, 1, b), hbm_bytes(n, d, n, b)
    # One row per tile is the naive read pattern less its second pass over K: same order of magnitude.
    assert 0.5 < at_one["tiled"] / at_one["naive"] < 1.0
    assert at_one["tiled"] > 100 * at_one["ideal"]
    # One tile holding every query reads each byte once: the ideal, plus the float32 LSE.
    assert at_n["tiled"] == at_n["ideal"] + 4 * n == roofline.flash_attention_bytes(n, n, d, b) + 4 * n
    # In between, K and V traffic shrinks by BLOCK_M.
    kv_at_64 = hbm_bytes(n, d, 64, b)["tiled"] - 2 * n * d * b - 4 * n
    assert kv_at_64 == 2 * (n // 64) * n * d * b


@pytest.mark.parametrize("args", [(0, 64, 16, 2), (128, 0, 16, 2), (128, 64, 0, 2), (128, 64, 16, 0)])
def test_byte_counts_reject_bad_sizes_with_a_sentence(args):
    with pytest.raises(ValueError, match=r"must be a whole number of at least 1"):
        hbm_bytes(*args)


def test_while_grading_the_explorer_draws_nothing(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    shown = tiling_explorer()
    assert isinstance(shown, NotWhileGrading)
    assert repr(shown).startswith("(tiling_explorer: ") and "JupyterLab" in repr(shown)


def test_the_explorer_steps_through_the_key_tiles(monkeypatch):
    import ipywidgets as w
    import matplotlib
    matplotlib.use("Agg")
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    box = tiling_explorer()
    assert isinstance(box, w.VBox)

    def controls(widget):
        for child in getattr(widget, "children", ()):
            yield child
            yield from controls(child)

    found = list(controls(box))
    slider = next(c for c in found if isinstance(c, w.IntSlider))
    text = next(c for c in found if isinstance(c, w.HTML))
    assert slider.description == "key tile" and not slider.continuous_update
    first = text.value
    assert "K/V tile 0" in first and "α" in first and "bytes" in first
    slider.value = 3
    assert "K/V tile 3" in text.value and text.value != first
    # A larger BLOCK_N leaves fewer key tiles; the slider follows.
    block_n = next(c for c in found if isinstance(c, w.Dropdown) and c.description == "BLOCK_N")
    block_n.value = 32
    assert slider.max == 3 and "K/V tile 3" in text.value
    block_n.value = 24  # does not divide 128: six tiles, the last one short
    assert slider.max == 5
    slider.value = 5
    assert "keys 120–127" in text.value


def test_the_explorer_draws_what_the_lesson_says(monkeypatch):
    """Lesson 03's prose calls the used K/V tiles "greyed" and the byte plot's menu the length N: the widget draws
    a grey tint with no hatching, and its menu names a length, not bytes."""
    import ipywidgets as w
    import matplotlib
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba
    from course.widgets import tiling
    matplotlib.use("Agg")
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    shown = []
    monkeypatch.setattr(tiling, "show", lambda fig: shown.append(fig))
    box = tiling_explorer()

    def controls(widget):
        for child in getattr(widget, "children", ()):
            yield child
            yield from controls(child)
    found = list(controls(box))
    slider = next(c for c in found if isinstance(c, w.IntSlider) and c.description == "key tile")
    slider.value = 2  # two tiles used and gone
    menus = [c.description for c in found if isinstance(c, w.Dropdown)]
    assert "length N" in menus and not any("bytes" in m for m in menus), menus
    scores = shown[-1].axes[0]
    used = [p for p in scores.patches if p.get_facecolor() == to_rgba("grey", tiling.USED["alpha"])]
    assert len(used) == 1 and not used[0].get_hatch()
    labels = [t.get_text() for t in scores.get_legend().get_texts()]
    assert any("greyed" in label for label in labels), labels
    prose = (REPO / "solutions/03_tiling/03_tiling.ipynb").read_text()
    assert "greyed" in prose and "hatched" not in prose and "**length N**" in prose
    plt.close("all")
