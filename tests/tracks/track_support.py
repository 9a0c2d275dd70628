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
