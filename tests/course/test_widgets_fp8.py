"""Lesson 08's fp8 widget: what a scale does to a tensor on each format's grid, the attention error beside it, and the
built widget redrawing when its first slider moves."""
from __future__ import annotations

import math

import torch

from course.models import fp8
from course.widgets.base import NotWhileGrading
from course.widgets.fp8 import fp8_attention_error, fp8_explorer, fp8_view, quantised, sample_qkv
from widget_support import move_first_slider


def test_the_right_scale_clips_nothing_and_a_larger_one_clips_the_top():
    x = torch.tensor([1000.0, -500.0, 3.0, 0.01, 0.0])
    at_max = math.log2(448.0 / 1000.0)
    view = fp8_view(x, "e4m3fn", at_max)
    assert view.clipped == 0.0 and view.flushed == 0.0
    assert math.isclose(float(quantised(x, "e4m3fn", at_max)[0]), 1000.0, rel_tol=1e-12)  # amax lands on 448
    assert math.isclose(view.step_at_top, 32.0 * 1000.0 / 448.0, rel_tol=1e-12)  # 448 = 1.75·2^8: steps of 2^(8-3)
    over = fp8_view(x, "e4m3fn", at_max + 1)                           # 1000 → 896: clips; 500 → 448 does not
    assert over.clipped == 1 / 5
    assert math.isclose(float(quantised(x, "e4m3fn", at_max + 1)[0]), 448.0 / 2 ** (at_max + 1), rel_tol=1e-12)


def test_a_smaller_scale_pushes_small_values_into_the_subnormals_and_then_to_zero():
    x = torch.tensor([1000.0, 1.0])
    at_max = math.log2(448.0 / 1000.0)
    assert fp8_view(x, "e4m3fn", at_max).subnormal == 0.0               # 1 → 0.448: normal
    low = fp8_view(x, "e4m3fn", at_max - 6)                              # 1 → 0.007: below 2^-6
    assert low.subnormal == 0.5 and low.flushed == 0.0
    assert fp8_view(x, "e4m3fn", at_max - 10).flushed == 0.5            # 1 → 0.00044: below half of 2^-9
    assert fp8_view(x, "e5m2", math.log2(57344.0 / 1000.0) - 10).flushed == 0.0  # e5m2 keeps it


def test_the_attention_error_is_smallest_near_the_scale_that_fits_and_e5m2_wins_with_massive_activations():
    q, k, v = sample_qkv()
    e4m3 = {o: fp8_attention_error(q, k, v, "e4m3fn", o) for o in (-4, 0, 2)}
    e5m2 = fp8_attention_error(q, k, v, "e5m2", 0)
    assert e4m3[0] < e4m3[2] and e4m3[0] < e4m3[-4]
    assert e5m2 < e4m3[0] and fp8.choose_format(k) is fp8.E5M2
    plain = sample_qkv(outliers=False)
    assert fp8_attention_error(*plain, "e4m3fn", 0) < fp8_attention_error(*plain, "e5m2", 0)
    assert fp8.choose_format(plain[1]) is fp8.E4M3


def test_the_built_widget_redraws_when_its_first_slider_moves(monkeypatch):
    import course.widgets.fp8 as module
    shown = []
    monkeypatch.setattr(module, "show", lambda fig, **kw: shown.append(fig))
    slider, text, before = move_first_slider(fp8_explorer(), shown)
    assert "clip" in before and "Attention's error" in before


def test_while_grading_it_draws_nothing(monkeypatch):
    from course.grading import recording
    monkeypatch.setattr(recording, "autograding", lambda: True)
    assert isinstance(fp8_explorer(), NotWhileGrading)
