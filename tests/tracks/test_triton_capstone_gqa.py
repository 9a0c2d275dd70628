"""Lesson 08's grouped-query attention without copies: the capstone's backward maps the heads itself.

Query head h reads K/V head h // (H / H_kv); the dK/dV program of a K/V head loops over the query heads of
its group and sums their shares in registers, the dQ program reads K and V through the mapping. Two claims:
the gradients match the float64 oracle within the course's error budget, and no tensor of the size of K
expanded to H heads is ever made, which is what the wrapper used to do (``repeat_interleave`` on K and V,
then a sum of the expanded gradients per group). The allocation check is shown to catch that old design.
"""
from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from course.grading.budget import attention_budget, plain_attention
from course.kernels import load_triton_module
from course.reference import attention, attention_backward
from track_support import device

B, H, NQ, NK, D = 1, 4, 20, 33, 16  # Nq != Nk: no legitimate tensor has the element count of K expanded to H heads


@pytest.fixture(scope="module")
def fa():
    return load_triton_module("triton/08_flash_attention")


class Allocations(TorchDispatchMode):
    """The shape and dtype of every tensor a PyTorch operator returns inside the block (the kernels' own
    buffers included: the wrappers make them with torch.empty/zeros)."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[tuple[str, tuple[int, ...], torch.dtype]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.made += [(str(func), tuple(t.shape), t.dtype) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        return out

    def expanded(self, b: int, h: int, n_k: int, d: int) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
        """Floating-point tensors of (…, Nk, D) rows holding as many elements as K with all H query heads."""
        return [m for m in self.made if m[2].is_floating_point and m[1][-2:] == (n_k, d)
                and torch.Size(m[1]).numel() == b * h * n_k * d]


def _inputs(h_kv: int, dtype: torch.dtype, seed: int):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, NQ, D, generator=gen, dtype=torch.float64).to(dtype)
    k = torch.randn(B, h_kv, NK, D, generator=gen, dtype=torch.float64).to(dtype)
    v = torch.randn(B, h_kv, NK, D, generator=gen, dtype=torch.float64).to(dtype)
    do = torch.randn(B, H, NQ, D, generator=gen, dtype=torch.float64).to(dtype)
    return q, k, v, do


def _wanted(q, k, v, do, causal):
    """(oracle, plain) gradients of q, k, v: float64, and plain PyTorch autograd at the inputs' dtype. Both
    expand K and V over the query heads, so the gradients of a shared head come back summed over its group."""
    group = q.shape[1] // k.shape[1]
    oracle = attention_backward(q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1), do, causal)
    summed = [oracle.dq] + [g.view(B, k.shape[1], group, NK, D).sum(dim=2) for g in (oracle.dk, oracle.dv)]
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    plain_attention(leaves[0], leaves[1].repeat_interleave(group, dim=1), leaves[2].repeat_interleave(group, dim=1),
                    causal=causal).backward(do)
    return summed, [t.grad for t in leaves]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("h_kv", [1, 2])
def test_grouped_gradients_match_the_oracle_without_expanding_k(fa, h_kv, causal, dtype):
    q, k, v, do = _inputs(h_kv, dtype, seed=10 * h_kv + causal)
    deterministic = dtype == torch.float16  # both dQ designs: split for fp16, atomic for fp32
    leaves = [t.detach().clone().to(device()).requires_grad_(True) for t in (q, k, v)]
    with Allocations() as seen:
        fa.flash_attention(*leaves, causal=causal, deterministic=deterministic).backward(do.to(device()))
    assert not seen.expanded(B, H, NK, D), f"K or V expanded to {H} heads: {seen.expanded(B, H, NK, D)[:3]}"
    assert tuple(leaves[1].grad.shape) == (B, h_kv, NK, D) and leaves[1].grad.dtype == dtype
    oracle, plain = _wanted(q, k, v, do, causal)
    for name, leaf, want, yard in zip(("dq", "dk", "dv"), leaves, oracle, plain):
        got = leaf.grad.cpu().double()
        budget = attention_budget(want, yard, dtype)
        err = float((got - want).abs().max())
        assert err <= budget.allowed, f"{name}, H_kv={h_kv}: error {err:.3g} > budget {budget.allowed:.3g}"


def test_the_allocation_check_catches_expanded_heads(fa):
    """The control: the capstone's former backward (K and V repeated over the query heads for lesson 07's
    backward, the expanded gradients summed per group) right in value, and caught by the check above."""
    q, k, v, do = (t.to(device()) for t in _inputs(2, torch.float32, seed=3))
    o, lse = fa._forward.causal_attention_forward(q, k, v, True, D ** -0.5)
    group = H // k.shape[1]

    def former_backward():
        dq, dk, dv = fa._backward.attention_backward_bhnd(q, k.repeat_interleave(group, dim=1),
                                                          v.repeat_interleave(group, dim=1), o, lse, do, causal=True)
        return dq, *(g.view(B, k.shape[1], group, NK, D).sum(dim=2) for g in (dk, dv))

    with Allocations() as seen:
        former = former_backward()
    assert seen.expanded(B, H, NK, D), "the old design expands K and V: the check must see it"
    with Allocations() as seen:
        grouped = fa._backward.attention_backward_bhnd(q, k, v, o, lse, do, causal=True)
    assert not seen.expanded(B, H, NK, D)
    for a, b in zip(former, grouped):
        assert a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-5)


def test_k_and_v_heads_must_divide_the_query_heads(fa):
    q, k, v, do = _inputs(2, torch.float32, seed=4)
    o, lse = attention(q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1), False)
    with pytest.raises(ValueError, match="head count dividing"):
        fa._backward.attention_backward_bhnd(q[:, :3], k, v, o[:, :3].float(), lse[:, :3].float(), do[:, :3])
