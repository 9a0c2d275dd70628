"""The comparisons with the oracle that the Triton track's checks use (course.grading.compare_attention,
course.grading.compare_values: softmax, merged states, LSE, gradients, races).

Right answers (computed with plain PyTorch) pass; each typical mistake fails with a message that
says what is wrong. The kernels themselves are tested in test_triton_*.py.
"""
from __future__ import annotations

import pytest
import torch

import course
from course.grading.compare_attention import check_attention, check_backward
from course.grading.compare_values import check_merge_states, check_softmax
from course.errors import CheckFailed
from course.inputs import Case

F16 = torch.float16


def merge(m_a, l_a, m_b, l_b):
    m = torch.maximum(m_a, m_b)
    finite = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    return m, l_a * torch.exp(m_a - finite) + l_b * torch.exp(m_b - finite)


def forward(q, k, v, causal=False, scale=None):
    out = course.attention(q, k, v, causal, scale)
    return out.o.to(q.dtype), out.lse.float()


def backward(q, k, v, o, lse, do, causal=False, scale=None):
    return tuple(g.to(q.dtype) for g in course.attention_backward(q, k, v, do, causal, scale))


SOFTMAX_CASES = [Case(17, 300, 16, kind="peaky", seed=1), Case(9, 33, 16, dtype=F16)]
LSE_CASES = [Case(17, 129, 16, causal=True), Case(129, 17, 32, causal=True, dtype=F16, seed=1)]
GRAD_CASES = [Case(17, 65, 16, causal=True), Case(65, 17, 16, causal=True, seed=1), Case(40, 40, 16, dtype=F16, seed=2)]


def test_right_answers_pass():
    assert check_softmax("t", lambda x: torch.softmax(x, dim=-1), SOFTMAX_CASES)
    assert check_merge_states("t", merge, [Case(7, 40, 16), Case(5, 129, 16, kind="peaky")])
    assert check_attention("t", forward, LSE_CASES, with_lse=True, pass_causal=True)
    assert check_backward("t", backward, GRAD_CASES)


@pytest.mark.parametrize("wrong, message", [
    (lambda x: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True), "NaN in 17 of 17 rows"),
    (lambda x: torch.softmax(x, dim=-1) * 1.3, r"rows sum to 1.3, 1.3, 1.3, …, not 1"),
    (lambda x: torch.softmax(x[..., :-1], dim=-1), "shape"),
])
def test_softmax_mistakes_fail(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_softmax("t", wrong, SOFTMAX_CASES)


def test_merge_mistakes_fail():
    def forgets_rescale_b(m_a, l_a, m_b, l_b):
        m = torch.maximum(m_a, m_b)
        return m, l_a * torch.exp(m_a - m) + l_b

    def unguarded(m_a, l_a, m_b, l_b):
        m = torch.maximum(m_a, m_b)
        return m, l_a * torch.exp(m_a - m) + l_b * torch.exp(m_b - m)

    with pytest.raises(CheckFailed, match="rescaled to the new max"):
        check_merge_states("t", forgets_rescale_b, [Case(7, 40, 16)])
    with pytest.raises(CheckFailed, match="empty"):
        check_merge_states("t", unguarded, [Case(7, 40, 16)])


def test_lse_mistakes_fail():
    log2 = lambda *a, **kw: (forward(*a, **kw)[0], forward(*a, **kw)[1] * 1.4426950408889634)  # noqa: E731
    with pytest.raises(CheckFailed, match="base-2 units"):
        check_attention("t", log2, LSE_CASES, with_lse=True, pass_causal=True)
    zero_not_inf = lambda *a, **kw: (forward(*a, **kw)[0], forward(*a, **kw)[1].nan_to_num(neginf=0.0))  # noqa: E731
    with pytest.raises(CheckFailed, match="should be -inf"):
        check_attention("t", zero_not_inf, [Case(129, 17, 32, causal=True)], with_lse=True, pass_causal=True)
    with pytest.raises(CheckFailed, match="expected a pair"):
        check_attention("t", lambda *a, **kw: forward(*a, **kw)[0], LSE_CASES, with_lse=True, pass_causal=True)


def test_gradient_mistakes_fail_and_name_the_gradient():
    def no_dq(*args, **kwargs):
        dq, dk, dv = backward(*args, **kwargs)
        return torch.zeros_like(dq), dk, dv

    def dk_unscaled(q, k, v, o, lse, do, causal=False, scale=None):
        dq, dk, dv = backward(q, k, v, o, lse, do, causal, scale)
        return dq, dk / scale, dv

    with pytest.raises(CheckFailed, match="wrong dq(.|\n)*dk and dv are right(.|\n)*hint: dq is all zeros"):
        check_backward("t", no_dq, GRAD_CASES)
    with pytest.raises(CheckFailed, match="wrong dk"):
        check_backward("t", dk_unscaled, GRAD_CASES)
    with pytest.raises(CheckFailed, match="three gradients"):
        check_backward("t", lambda *a, **kw: backward(*a, **kw)[:2], GRAD_CASES)


@pytest.mark.skipif(not course.tiers.triton_interpreted(), reason="the race detector watches Triton's interpreter")
def test_racecheck_catches_a_plain_read_modify_write_between_programs():
    import triton
    import triton.language as tl

    from course.grading.racecheck import RaceError, racecheck

    @triton.jit
    def column_sums(x_ptr, out_ptr, n, ATOMIC: tl.constexpr, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + tl.program_id(0) * n + cols, mask=cols < n)
        if ATOMIC:
            tl.atomic_add(out_ptr + cols, x, mask=cols < n)
        else:
            total = tl.load(out_ptr + cols, mask=cols < n)
            tl.store(out_ptr + cols, total + x, mask=cols < n)

    x = torch.randn(4, 10)
    for atomic in (True, False):
        out = torch.zeros(10)
        column_sums[(4,)](x, out, 10, ATOMIC=atomic, BLOCK=16)
        assert torch.allclose(out, x.sum(0)), "the interpreter runs programs in turn: both versions look right"

    out = torch.zeros(10)
    with racecheck():
        column_sums[(4,)](x, out, 10, ATOMIC=True, BLOCK=16)
    with pytest.raises(RaceError, match=r"programs \(0, 0, 0\) and \(1, 0, 0\) both store to element 0 of `out_ptr`"):
        with racecheck():
            column_sums[(4,)](x, out, 10, ATOMIC=False, BLOCK=16)

    # The course's checks report the race as a failed check, naming the line.
    def racy_sum(x):
        out = torch.zeros(x.shape[-1])
        column_sums[(x.shape[0],)](x, out, x.shape[-1], ATOMIC=False, BLOCK=16)
        return out
    from course.grading.comparison import learner_call
    with pytest.raises(CheckFailed, match="data race(.|\n)*tl.store\\(out_ptr"):
        learner_call("t", racy_sum, (x,), {}, "a 4×10 input", race=True)
