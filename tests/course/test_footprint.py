"""Lesson 03's PyTorch exercise must be tiled: the check watches what the function builds, so standard
attention, PyTorch's own attention or the N×N matrix moved into numpy all fail, and a real tiled loop passes."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import course
from course.errors import CheckFailed
from course.grading.footprint import watch


def tiled(q, k, v, block_m=16, block_n=16, scale=None):
    scale = 1.0 / math.sqrt(q.shape[1]) if scale is None else scale
    o, lse = torch.empty_like(q), torch.empty(q.shape[0])
    for i in range(0, q.shape[0], block_m):
        q_i = q[i:i + block_m].float()
        m, l = torch.full((q_i.shape[0],), -math.inf), torch.zeros(q_i.shape[0])
        acc = torch.zeros(q_i.shape[0], q.shape[1])
        for j in range(0, k.shape[0], block_n):
            s = q_i @ k[j:j + block_n].float().T * scale
            m_new = torch.maximum(m, s.amax(1))
            a, p = torch.exp(m - m_new), torch.exp(s - m_new[:, None])
            l, acc, m = l * a + p.sum(1), acc * a[:, None] + p @ v[j:j + block_n].float(), m_new
        o[i:i + block_m], lse[i:i + block_m] = (acc / l[:, None]).to(q.dtype), m + l.log()
    return o, lse


def _scale(q, scale):
    return 1.0 / math.sqrt(q.shape[1]) if scale is None else scale


def standard(q, k, v, block_m=16, block_n=16, scale=None):
    s = q.float() @ k.float().T * _scale(q, scale)
    return (torch.softmax(s, -1) @ v.float()).to(q.dtype), torch.logsumexp(s, -1)


def pytorch_attention(q, k, v, block_m=16, block_n=16, scale=None):
    o = F.scaled_dot_product_attention(q[None].float(), k[None].float(), v[None].float(), scale=_scale(q, scale))
    return o[0].to(q.dtype), tiled(q, k, v, block_m, block_n, scale)[1]


def in_numpy(q, k, v, block_m=16, block_n=16, scale=None):
    s = q.double().numpy() @ k.double().numpy().T * _scale(q, scale)
    m = s.max(1, keepdims=True)
    p = np.exp(s - m)
    l = p.sum(1, keepdims=True)
    return torch.from_numpy(p / l @ v.double().numpy()).to(q.dtype), torch.from_numpy((m + np.log(l))[:, 0]).float()


def test_a_tiled_loop_passes():
    course.check("03.tiled_torch", tiled)


@pytest.mark.parametrize("answer, message", [
    (standard, r"built a tensor of 448 × 384"),
    (pytorch_attention, r"built a tensor of 1 × 448 × 384|calls PyTorch's own attention"),
    (in_numpy, r"allocated [\d,]+ bytes outside PyTorch"),
])
def test_right_answers_that_are_not_tiled_fail(answer, message):
    assert torch.allclose(answer(*course.make_qkv(20, 16, seed=1))[0], tiled(*course.make_qkv(20, 16, seed=1))[0],
                          atol=1e-5), "the answer must be right, so only the footprint can fail it"
    with pytest.raises(CheckFailed, match=message):
        course.check("03.tiled_torch", answer)


def test_a_fused_attention_operator_is_named_and_stops_the_call():
    q, k, v = (torch.randn(1, 64, 16) for _ in range(3))
    calls = []

    def fused(q, k, v):
        calls.append("before")
        out = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q[None], k[None], v[None])[0]
        calls.append("after")
        return out
    result, seen = watch(fused, q, k, v)
    assert seen.fused_attention == ["_scaled_dot_product_flash_attention_for_cpu"]
    assert result is None and calls == ["before"]


def test_the_watch_counts_products_and_the_largest_tensor():
    q, k, v = (torch.randn(64, 16) for _ in range(3))
    _, seen = watch(tiled, q, k, v, block_m=16, block_n=32)
    assert seen.products == 2 * 4 * 2
    assert seen.largest == 64 * 16  # the output; no tile is bigger
    _, seen = watch(standard, q, k, v)
    assert seen.largest == 64 * 64 and seen.largest_shape == (64, 64)
