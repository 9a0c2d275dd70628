"""Helpers shared by the track tests (importable as ``track_support``: pytest puts tests/tracks on sys.path)."""
from __future__ import annotations

import torch

import course
from course.reference import attention


def backward_inputs(n_q: int, n_k: int, d: int, causal: bool = False, seed: int = 0, scale: float | None = None):
    """What a backward kernel is given: Q, K, V, the oracle's O and LSE (float32, as a forward writes them), dO."""
    q, k, v = course.make_qkv(n_q, d, n_k=n_k, seed=seed)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(seed + 1))
    fwd = attention(q, k, v, causal, scale=scale)
    return q, k, v, fwd.o.float(), fwd.lse.float(), do
