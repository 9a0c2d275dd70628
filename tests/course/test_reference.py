"""The float64 oracle agrees with PyTorch's own attention and autograd, including causal and odd shapes."""
from __future__ import annotations

import pytest
import torch

import course
from course.reference import attention, attention_backward, causal_mask


def _sdpa_with_grads(q, k, v, do, causal, scale):
    q, k, v = (t.double().detach().requires_grad_() for t in (q, k, v))
    n_q, n_k = q.shape[-2], k.shape[-2]
    mask = causal_mask(n_q, n_k) if causal else None
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    o.backward(do.double())
    return o.detach(), q.grad, k.grad, v.grad


SHAPES = [(1, 1, 16), (17, 17, 32), (17, 129, 64), (129, 130, 16), (5, 3, 128)]


# Causal with Nq > Nk has fully masked rows, where SDPA gives NaN; they have their own test below.
@pytest.mark.parametrize("n_q,n_k,d,causal", [(*s, False) for s in SHAPES] + [(*s, True) for s in SHAPES if s[0] <= s[1]])
def test_forward_and_backward_match_pytorch(n_q, n_k, d, causal):
    q, k, v = course.make_qkv(n_q, d, n_k=n_k, seed=n_q + n_k + d)
    do = torch.randn(n_q, d, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    o, dq, dk, dv = _sdpa_with_grads(q, k, v, do, causal, scale=0.3)
    ref = attention(q, k, v, causal, scale=0.3)
    grads = attention_backward(q, k, v, do, causal, scale=0.3)
    torch.testing.assert_close(ref.o, o, rtol=1e-12, atol=1e-12)
    for mine, theirs in zip(grads, (dq, dk, dv)):
        torch.testing.assert_close(mine, theirs, rtol=1e-10, atol=1e-10)


def test_lse_is_logsumexp_of_scaled_scores():
    q, k, v = course.make_qkv(9, 16, n_k=11, seed=3)
    ref = attention(q, k, v)
    expected = torch.logsumexp(q.double() @ k.double().T / 4.0, dim=-1)
    torch.testing.assert_close(ref.lse, expected)


def test_batched_shapes_match_per_head():
    q, k, v = course.make_qkv(7, 32, n_k=9, batch=(2, 3), seed=4)
    ref = attention(q, k, v, causal=True)
    for b in range(2):
        for h in range(3):
            one = attention(q[b, h], k[b, h], v[b, h], causal=True)
            torch.testing.assert_close(ref.o[b, h], one.o)
            torch.testing.assert_close(ref.lse[b, h], one.lse)


def test_causal_is_bottom_right_aligned():
    mask = causal_mask(2, 4)
    # The last query sees every key; the first sees all but the last.
    assert mask.tolist() == [[True, True, True, False], [True, True, True, True]]


def test_fully_masked_rows_are_zero_not_nan():
    q, k, v = course.make_qkv(5, 16, n_k=2, seed=5)  # rows 0..2 see no key
    ref = attention(q, k, v, causal=True)
    assert torch.isfinite(ref.o).all()
    assert (ref.o[:3] == 0).all() and torch.isneginf(ref.lse[:3]).all()
    grads = attention_backward(q, k, v, torch.ones(5, 16), causal=True)
    assert all(torch.isfinite(g).all() for g in grads)
    assert (grads.dq[:3] == 0).all()


def test_bad_shapes_are_explained():
    q, k, v = course.make_qkv(4, 16, seed=0)
    with pytest.raises(ValueError, match="head dim"):
        attention(q, k[:, :8], v)
    with pytest.raises(ValueError, match="same number of keys"):
        attention(q, k, v[:3])
