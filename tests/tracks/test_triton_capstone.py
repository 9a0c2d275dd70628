"""Lesson 08's flash_attention: an autograd operator over (B, H, N, D), GQA, and clear input errors."""
from __future__ import annotations

import pytest
import torch

import course
from course.kernels import load_triton_module
from track_support import device, randn

pytestmark = [pytest.mark.gpu, pytest.mark.tier_devices]


@pytest.fixture(scope="module")
def fa():
    return load_triton_module("triton/08_flash_attention").flash_attention


@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_attention_matches_the_oracle(fa, causal):
    q = randn(2, 6, 33, 32, seed=3).requires_grad_(True)
    k = randn(2, 2, 40, 32, seed=4).requires_grad_(True)
    v = randn(2, 2, 40, 32, seed=5).requires_grad_(True)
    o = fa(q, k, v, causal=causal)
    do = randn(*o.shape, seed=6)
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
    q, k, v = (t.requires_grad_(True) for t in course.make_qkv(65, 32, batch=(1, 2), seed=4, device=device()))
    runs = []
    for _ in range(2):
        for t in (q, k, v):
            t.grad = None
        fa(q, k, v, causal=True, deterministic=True).sum().backward()
        runs.append([t.grad.clone() for t in (q, k, v)])
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def _t(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(device(), dtype)


@pytest.mark.parametrize("args, kwargs, message", [
    (lambda: (_t(4, 16), _t(4, 16), _t(4, 16)), {}, r"\(batch, heads, seq_len, head_dim\)"),
    (lambda: (_t(1, 2, 4, 16), _t(1, 2, 4, 16, dtype=torch.half), _t(1, 2, 4, 16)), {}, "share a dtype"),
    (lambda: (_t(1, 2, 4, 16, dtype=torch.double),) * 3, {}, "float64 is not supported"),
    (lambda: (_t(1, 2, 4, 300),) * 3, {}, "head dim 300"),
    (lambda: (_t(1, 3, 4, 16), _t(1, 2, 4, 16), _t(1, 2, 4, 16)), {}, "must divide"),
    (lambda: (_t(1, 2, 4, 16), _t(2, 2, 4, 16), _t(2, 2, 4, 16)), {}, "batch sizes differ"),
    (lambda: (_t(1, 2, 4, 16), _t(1, 2, 4, 8), _t(1, 2, 4, 8)), {}, "share the head dim"),
    (lambda: (_t(1, 2, 4, 16), _t(1, 2, 5, 16), _t(1, 2, 4, 16)), {}, "same shape"),
    (lambda: (_t(1, 2, 0, 16), _t(1, 2, 4, 16), _t(1, 2, 4, 16)), {}, "empty sequence"),
    (lambda: (_t(1, 2, 4, 16),) * 3, {"scale": -1.0}, "positive finite"),
], ids=["not-4d", "dtypes", "float64", "head-dim", "heads", "batch", "head-dims", "kv-shapes", "empty", "scale"])
def test_bad_inputs_get_one_clear_sentence(fa, args, kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        fa(*args(), **kwargs)


@pytest.mark.cpu_tier("the interpreter's tl.dot gets bfloat16 wrong, so only the CPU tier refuses it")
def test_bfloat16_is_refused_on_the_interpreter(fa):
    with pytest.raises(TypeError, match="bfloat16 runs on a GPU"):
        fa(*(torch.randn(1, 2, 4, 16).bfloat16(),) * 3)


def test_cpu_tensors_are_refused_when_triton_compiles_for_a_gpu(fa, monkeypatch):
    """On the GPU tier a CPU tensor would reach a kernel that reads GPU memory: the operator says so first
    (on the CPU tier the interpreter is switched off for the operator's own test of it)."""
    module = load_triton_module("triton/08_flash_attention")
    monkeypatch.setattr(module, "_interpreted", lambda: False)
    with pytest.raises(ValueError, match="move them to the GPU"):
        module.flash_attention(*(torch.randn(1, 2, 4, 16),) * 3)
