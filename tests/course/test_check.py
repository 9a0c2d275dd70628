"""check(): right answers pass, wrong ones fail with a diagnosis that names the mistake."""
from __future__ import annotations

import math

import pytest
import torch

import course
from course.grading.budget import attention_budget, plain_attention
from course.errors import CheckFailed, learner_traceback


def good_attention(q, k, v, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return torch.softmax(q @ k.T * scale, dim=-1) @ v


def failure(fn, exercise="01.attention_torch") -> str:
    with pytest.raises(CheckFailed) as info:
        course.check(exercise, fn)
    return str(info.value)


def test_correct_attention_passes(capsys):
    report = course.check("01.attention_torch", good_attention)
    assert report and report.cases > 10 and 0 < report.worst_ratio < 1
    assert "✓ 01.attention_torch" in capsys.readouterr().out


@pytest.mark.parametrize("wrong,expected_hint", [
    (lambda q, k, v, scale=None: torch.zeros_like(q), "all zeros"),
    (lambda q, k, v, scale=None: v.mean(0, keepdim=True).expand_as(q), "mean of V"),
    (lambda q, k, v, scale=None: torch.softmax(q @ k.T, -1) @ v, "without the scale (1/sqrt(D)"),
    (lambda q, k, v, scale=None: (torch.exp(q @ k.T / math.sqrt(q.shape[-1]))
                                  / torch.exp(q @ k.T / math.sqrt(q.shape[-1])).sum(-1, keepdim=True)) @ v,
     "exp() leaves float32's range"),
    (lambda q, k, v, scale=None: torch.roll(good_attention(q, k, v, scale), 1, dims=0), "off-by-one"),
])
def test_wrong_attention_gets_a_specific_hint(wrong, expected_hint):
    assert expected_hint in failure(wrong)


def test_ignoring_the_scale_argument_fails():
    message = failure(lambda q, k, v, scale=None: good_attention(q, k, v))
    assert "wrong answer" in message


def test_wrong_shape_is_named():
    message = failure(lambda q, k, v, scale=None: good_attention(q, k, v, scale).T.contiguous())
    assert "shape" in message


def test_learner_exception_shows_their_line_not_course_internals():
    def broken(q, k, v, scale=None):
        return q @ v.T @ k.T @ q  # shapes do not line up for Nq != Nk
    message = failure(broken)
    assert "your code raised" in message and "RuntimeError" in message
    assert "course/grading/" not in message and "broken" in message


def test_not_implemented_reads_as_not_done_yet():
    def stub(q, k, v, scale=None):
        raise NotImplementedError()
    assert "not implemented yet" in failure(stub)


def test_unknown_exercise_and_non_callable():
    with pytest.raises(CheckFailed, match="unknown exercise"):
        course.check("99.nope", good_attention)
    with pytest.raises(CheckFailed, match="expected your function"):
        course.check("01.attention_torch", 42)


def test_budget_scales_with_precision():
    q, k, v = course.make_qkv(64, 64, seed=1)
    ref = course.attention(q, k, v).o
    b32 = attention_budget(ref, plain_attention(q, k, v), torch.float32)
    q16, k16, v16 = (t.half() for t in (q, k, v))
    b16 = attention_budget(ref, plain_attention(q16, k16, v16), torch.float16)
    assert b16.allowed > 100 * b32.allowed
    # An answer rounded to fp16 is fine for an fp16 kernel and far outside an fp32 budget.
    err = float((ref.half().double() - ref).abs().max())
    assert err <= b16.allowed and err > b32.allowed


def test_number_checks_fail_and_say_what_came_back():
    """The hints of the number exercises are tested in test_hints.py; here: wrong values fail, odd ones are named."""
    assert "returned 2, expected 4" in failure(lambda n_q, n_k, d: 2 * n_q * n_k * d, "00.attention_flops")

    def returns_text(n, d, dtype):
        return "a lot"
    assert "expected a number" in failure(returns_text, "01.naive_bytes_read")


def test_learner_traceback_keeps_only_learner_frames():
    def inner():
        return {}["missing"]
    try:
        inner()
    except KeyError as exc:
        text = learner_traceback(exc)
    assert "inner" in text and "KeyError" in text
