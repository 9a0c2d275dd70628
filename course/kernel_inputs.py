"""The input checks every attention kernel wrapper of the Triton track shares.

A wrapper that launches a kernel on bad tensors gets garbage or a crash, not an error, so each one
checks its q, k, v first and says in one sentence what is wrong.
"""
from __future__ import annotations

import torch

__all__ = ["check_qkv", "KERNEL_DTYPES", "MAX_HEAD_DIM"]

KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 256


def check_qkv(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, same_batch: bool = True) -> None:
    """Raise ValueError unless Q (..., Nq, D), K and V (..., Nk, D) can go to an attention kernel.

    ``same_batch=False`` leaves the leading dimensions to the caller (grouped-query attention gives
    K and V fewer heads than Q).
    """
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        raise ValueError(f"{name} takes torch.Tensors q, k, v")
    shapes = f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
    if q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(f"{name} takes q, k, v of shape (..., N, D), all with the same rank; got {shapes}")
    if same_batch and not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(f"{name}: q, k, v must have the same leading (batch) dimensions; got {shapes}")
    if k.shape != v.shape or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"{name} needs Q (..., Nq, D) and K, V (..., Nk, D) of one shape with one D; got {shapes}")
    if k.shape[-2] == 0:
        raise ValueError(f"{name}: attention over zero keys is undefined (K and V have no rows)")
    if not 1 <= q.shape[-1] <= MAX_HEAD_DIM:
        raise ValueError(f"{name}: the head dim D must be between 1 and {MAX_HEAD_DIM} (1..{MAX_HEAD_DIM}); "
                         f"got D = {q.shape[-1]}")
    if q.dtype not in KERNEL_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"{name}: q, k, v must share one dtype among float16, bfloat16 or float32; "
                         f"got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"{name}: q, k, v are on different devices ({q.device}, {k.device}, {v.device})")
