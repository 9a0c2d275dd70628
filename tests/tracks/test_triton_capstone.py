"""Lesson 08's flash_attention: an autograd operator over (B, H, N, D), GQA, and clear input errors."""
from __future__ import annotations

import pytest
import torch

import course
from course.kernels import load_triton_module


@pytest.fixture(scope="module")
def fa():
    return load_triton_module("triton/08_flash_attention").flash_attention


@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_attention_matches_the_oracle(fa, causal):
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 6, 33, 32, generator=gen, requires_grad=True)
    k = torch.randn(2, 2, 40, 32, generator=gen, requires_grad=True)
    v = torch.randn(2, 2, 40, 32, generator=gen, requires_grad=True)
    o = fa(q, k, v, causal=causal)
    do = torch.randn(o.shape, generator=gen)
    o.backward(do)
    k3, v3 = k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1)  # query head h reads K/V head h // 3
    ref = course.attention(q, k3, v3, causal)
    grads = course.attention_backward(q, k3, v3, do, causal)
    assert (o.double() - ref.o).abs().max() < 1e-5
    assert (q.grad.double() - grads.dq).abs().max() < 1e-5
    for got, want in ((k.grad, grads.dk), (v.grad, grads.dv)):
        summed = want.view(2, 2, 3, 40, 32).sum(dim=2)  # a shared K/V head gets the gradients of its whole group
        assert (got.double() - summed).abs().max() < 1e-5


def test_deterministic_backward_repeats_bit_for_bit(fa):
    q, k, v = (t.requires_grad_(True) for t in course.make_qkv(65, 32, batch=(1, 2), seed=4))
    runs = []
    for _ in range(2):
        for t in (q, k, v):
            t.grad = None
        fa(q, k, v, causal=True, deterministic=True).sum().backward()
        runs.append([t.grad.clone() for t in (q, k, v)])
    assert all(torch.equal(a, b) for a, b in zip(*runs))


@pytest.mark.parametrize("args, kwargs, message", [
    ((torch.randn(4, 16), torch.randn(4, 16), torch.randn(4, 16)), {}, r"\(batch, heads, seq_len, head_dim\)"),
    ((torch.randn(1, 2, 4, 16), torch.randn(1, 2, 4, 16).half(), torch.randn(1, 2, 4, 16)), {}, "share a dtype"),
    ((torch.randn(1, 2, 4, 16).double(),) * 3, {}, "float64 is not supported"),
    ((torch.randn(1, 2, 4, 300),) * 3, {}, "head dim 300"),
    ((torch.randn(1, 3, 4, 16), torch.randn(1, 2, 4, 16), torch.randn(1, 2, 4, 16)), {}, "must divide"),
    ((torch.randn(1, 2, 4, 16), torch.randn(2, 2, 4, 16), torch.randn(2, 2, 4, 16)), {}, "batch sizes differ"),
    ((torch.randn(1, 2, 4, 16), torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)), {}, "share the head dim"),
    ((torch.randn(1, 2, 4, 16), torch.randn(1, 2, 5, 16), torch.randn(1, 2, 4, 16)), {}, "same shape"),
    ((torch.randn(1, 2, 0, 16), torch.randn(1, 2, 4, 16), torch.randn(1, 2, 4, 16)), {}, "empty sequence"),
    ((torch.randn(1, 2, 4, 16),) * 3, {"scale": -1.0}, "positive finite"),
    # on the CPU tier only: the interpreter's tl.dot on bfloat16 is wrong, so the operator refuses it there
    ((torch.randn(1, 2, 4, 16).bfloat16(),) * 3, {}, "bfloat16 runs on a GPU|move them to the GPU"),
])
def test_bad_inputs_get_one_clear_sentence(fa, args, kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        fa(*args, **kwargs)
