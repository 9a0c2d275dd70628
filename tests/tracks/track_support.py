"""Helpers shared by the track tests (importable as ``track_support``: pytest puts tests/tracks on sys.path).

The Triton tests run on the tier's device (``course.tiers.device()``): the GPU in the GPU suite, the CPU on
the CPU tier, where ``tier_devices`` checks that nothing reaches a kernel without asking for it. The device
is asked for at call time, never kept in a module constant: inside the device rules the tier's "cpu" is a
marked one.
"""
from __future__ import annotations

import torch

import course
from course.reference import attention


def device() -> str:
    """The tier's device, asked now."""
    return course.tiers.device()


def on_device(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The tensors moved to the tier's device (made on the CPU first, so their values are the same everywhere)."""
    return tuple(t.to(device()) for t in tensors)


def qkv(n_q: int, d: int, **kwargs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """course.make_qkv on the tier's device."""
    return course.make_qkv(n_q, d, device=device(), **kwargs)


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Seeded normal values drawn on the CPU, on the tier's device."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype).to(device())


def backward_inputs(n_q: int, n_k: int, d: int, causal: bool = False, seed: int = 0, scale: float | None = None,
                    device: str = "cpu"):
    """What a backward kernel is given: Q, K, V, the oracle's O and LSE (float32, as a forward writes them), dO.
    On the CPU (the CPU runtime of CUDA C and Metal reads CPU memory) unless ``device`` says otherwise."""
    q, k, v = course.make_qkv(n_q, d, n_k=n_k, seed=seed)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(seed + 1))
    fwd = attention(q, k, v, causal, scale=scale)
    return tuple(t.to(device) for t in (q, k, v, fwd.o.float(), fwd.lse.float(), do))


def grouped_backward_case(n_q: int, n_k: int, d: int, dtype: torch.dtype, heads: int = 2, kv_heads: int = 1,
                          causal: bool = True, seed: int = 0):
    """Backward inputs for (1, heads, N, D) queries over kv_heads K/V heads, on the tier's device, and the wanted
    gradients: (float64 oracle, plain PyTorch autograd at dtype), those of K and V summed over each group."""
    from course.grading.budget import plain_attention
    from course.reference import attention_backward
    gen = torch.Generator().manual_seed(seed)
    group = heads // kv_heads
    q = torch.randn(1, heads, n_q, d, generator=gen, dtype=torch.float64).to(dtype)
    k, v = (torch.randn(1, kv_heads, n_k, d, generator=gen, dtype=torch.float64).to(dtype) for _ in range(2))
    do = torch.randn(1, heads, n_q, d, generator=gen, dtype=torch.float64).to(dtype)
    k_all, v_all = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    fwd = attention(q, k_all, v_all, causal)
    oracle = attention_backward(q, k_all, v_all, do, causal)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    plain_attention(leaves[0], leaves[1].repeat_interleave(group, dim=1), leaves[2].repeat_interleave(group, dim=1),
                    causal=causal).backward(do)
    summed = [g.view(1, kv_heads, group, n_k, d).sum(dim=2) for g in (oracle.dk, oracle.dv)]
    args = tuple(t.to(device()) for t in (q, k, v, fwd.o.to(dtype), fwd.lse.float(), do))
    return args, [oracle.dq, *summed], [t.grad for t in leaves]
