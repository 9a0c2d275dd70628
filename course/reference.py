"""The course's one oracle: attention in float64 PyTorch, forward and backward.

Every kernel in the course is compared against these functions. They are written out step by
step (no autograd, no fused SDPA) so that a learner can read them next to the math:

    S = scale * Q Kᵀ            (masked entries are -inf)
    LSE_i = log Σ_j exp(S_ij)   (-inf for a row with no visible key)
    P = exp(S - LSE)            (0 on a fully masked row)
    O = P V

Shapes are (N, D) or batched (..., N, D), e.g. (B, H, N, D). ``causal`` uses bottom-right
alignment: query i may see key j when j <= i + (Nk - Nq), which is what FlashAttention does when
the query block is the tail of a longer sequence (decoding with a KV cache). With Nq > Nk the
first Nq - Nk rows see no key at all; we define their output as 0 and their LSE as -inf.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

__all__ = ["AttentionOutput", "AttentionGrads", "attention", "attention_backward", "causal_mask", "default_scale"]


class AttentionOutput(NamedTuple):
    o: torch.Tensor
    """(..., Nq, D) output, float64."""
    lse: torch.Tensor
    """(..., Nq) log-sum-exp of each row of scaled scores, float64 (-inf on fully masked rows)."""


class AttentionGrads(NamedTuple):
    dq: torch.Tensor
    dk: torch.Tensor
    dv: torch.Tensor


def default_scale(head_dim: int) -> float:
    """1/sqrt(D): keeps the variance of a score near 1 when q and k have unit-variance entries."""
    return 1.0 / math.sqrt(head_dim)


def causal_mask(n_q: int, n_k: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Boolean (Nq, Nk) mask, True where query i may attend to key j (bottom-right aligned)."""
    i = torch.arange(n_q, device=device)[:, None]
    j = torch.arange(n_k, device=device)[None, :]
    return j <= i + (n_k - n_q)


def _validate(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(f"q, k, v must all be (N, D) or (..., N, D); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        raise ValueError(f"batch dimensions differ: {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the head dim; got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of keys; got {k.shape[-2]} and {v.shape[-2]}")


def _probabilities(q: torch.Tensor, k: torch.Tensor, causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """P and LSE in float64; fully masked rows give P = 0 and LSE = -inf (never NaN)."""
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~causal_mask(s.shape[-2], s.shape[-1], s.device), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    # exp(-inf - (-inf)) would be NaN; a row with no visible key gets weight 0 everywhere.
    safe_lse = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    p = torch.exp(s - safe_lse[..., None])
    return p, lse


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None) -> AttentionOutput:
    """Reference forward pass: O and LSE in float64 (inputs of any floating dtype)."""
    _validate(q, k, v)
    scale = default_scale(q.shape[-1]) if scale is None else float(scale)
    p, lse = _probabilities(q, k, causal, scale)
    return AttentionOutput(p @ v.double(), lse)


def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor,
                       causal: bool = False, scale: float | None = None) -> AttentionGrads:
    """Reference backward pass in float64: gradients of <O, dO> with respect to Q, K and V.

    dV = Pᵀ dO;  dP = dO Vᵀ;  Δ_i = Σ_d dO_id O_id;  dS = P ∘ (dP - Δ);  dQ = scale dS K;  dK = scale dSᵀ Q
    """
    _validate(q, k, v)
    if do.shape != q.shape[:-1] + (v.shape[-1],):
        raise ValueError(f"do must have the shape of O {tuple(q.shape[:-1]) + (v.shape[-1],)}; got {tuple(do.shape)}")
    scale = default_scale(q.shape[-1]) if scale is None else float(scale)
    q64, k64, v64, do64 = q.double(), k.double(), v.double(), do.double()
    p, _ = _probabilities(q64, k64, causal, scale)
    o = p @ v64
    dv = p.transpose(-1, -2) @ do64
    dp = do64 @ v64.transpose(-1, -2)
    delta = (do64 * o).sum(dim=-1, keepdim=True)
    ds = p * (dp - delta)
    return AttentionGrads(dq=scale * ds @ k64, dk=scale * ds.transpose(-1, -2) @ q64, dv=dv)
