"""Tolerance as an error budget.

A bare ``allclose(atol, rtol)`` is either too loose for float32 or too tight for float16, and it
says nothing about what accuracy is achievable. The rule used here (the one the flash-attention
project tests with): a kernel's output passes when

    max |kernel - oracle|  <=  k * max |plain - oracle|  +  floor

where *oracle* is the float64 reference, *plain* is the textbook PyTorch attention computed at the
kernel's own input precision, and *floor* is a few units in the last place of the output's scale
(it only matters when the plain error happens to be exactly 0, e.g. N = 1 where O = V). A kernel
can therefore be as sloppy as an ordinary implementation at that precision, times ``k``, and no
sloppier.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from course.reference import causal_mask, default_scale

__all__ = ["Budget", "plain_attention", "attention_budget", "DEFAULT_K", "FLOOR_ULPS"]

DEFAULT_K = 2.0
FLOOR_ULPS = 8.0


def plain_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    scale: float | None = None) -> torch.Tensor:
    """Textbook attention at the inputs' own precision: the yardstick for what is achievable."""
    scale = default_scale(q.shape[-1]) if scale is None else float(scale)
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~causal_mask(s.shape[-2], s.shape[-1], s.device), float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # fully masked rows: softmax of all -inf is NaN
    return p @ v


@dataclass(frozen=True)
class Budget:
    """How much error a result may have, and how that number came about."""

    allowed: float
    plain_error: float
    k: float
    floor: float

    def ratio(self, error: float) -> float:
        """error / allowed: below 1 passes."""
        return error / self.allowed if self.allowed > 0 else float("inf")


def attention_budget(oracle: torch.Tensor, plain: torch.Tensor, dtype: torch.dtype, k: float = DEFAULT_K) -> Budget:
    """Budget for an output compared against ``oracle`` (float64), given ``plain`` at ``dtype``."""
    plain_error = float((plain.double() - oracle).abs().max()) if oracle.numel() else 0.0
    scale = float(oracle.abs().max()) if oracle.numel() else 1.0
    floor = FLOOR_ULPS * torch.finfo(dtype).eps * max(scale, 1.0)
    return Budget(allowed=k * plain_error + floor, plain_error=plain_error, k=k, floor=floor)
