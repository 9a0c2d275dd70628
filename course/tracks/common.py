"""What every track's launcher shares: input checks, tile and grid arithmetic, reading a kernel's #defines.

A wrapper that launches a kernel on bad tensors gets garbage or a crash, not an error, so each one
checks its inputs first and says in one sentence what is wrong. The Triton kernel files import
:func:`check_qkv` too; its :class:`InputError` is a ``ValueError`` (what a PyTorch caller expects from
a bad argument) and a :class:`~course.errors.CourseError` (shown to a learner as a sentence).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from course.errors import CourseError

__all__ = ["InputError", "check_qkv", "KERNEL_DTYPES", "MAX_HEAD_DIM", "Tiles", "blocks_for",
           "kernel_defines", "as_float32_array", "backward_arrays", "GRADING_LAUNCH", "need"]

KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 256

# How checks launch a learner's CUDA or Metal kernel on the CPU runtime: every access bounds-checked
# and race-checked, threads and blocks in a seeded random order. (A kernel that is right passes in any order.)
GRADING_LAUNCH: dict[str, Any] = dict(check=("memcheck", "racecheck"), schedule="random")


class InputError(CourseError, ValueError):
    """A kernel wrapper was given inputs it cannot take."""

    title = "bad input"


def need(condition: bool, sentence: str) -> None:
    """Raise a CourseError with ``sentence`` unless ``condition`` holds."""
    if not condition:
        raise CourseError(sentence)


def check_qkv(name: str, q: Any, k: Any, v: Any, *, same_batch: bool = True,
              dtypes: Sequence[torch.dtype] | None = KERNEL_DTYPES, max_head_dim: int = MAX_HEAD_DIM) -> None:
    """Raise InputError unless Q (..., Nq, D), K and V (..., Nk, D) can go to an attention kernel.

    ``same_batch=False`` leaves the leading dimensions to the caller (grouped-query attention gives
    K and V fewer heads than Q); ``dtypes=None`` accepts any dtype (launchers that convert the inputs).
    """
    for t, arg in ((q, "q"), (k, "k"), (v, "v")):
        if not isinstance(t, torch.Tensor):
            raise InputError(f"{name} takes torch.Tensors q, k, v; {arg} is a {type(t).__name__}")
    shapes = f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
    if q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim():
        raise InputError(f"{name} takes q, k, v of shape (..., N, D), all with the same rank; got {shapes}")
    if same_batch and not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise InputError(f"{name}: q, k, v must have the same leading dims (batch, heads); got {shapes}")
    if k.shape != v.shape or q.shape[-1] != k.shape[-1]:
        raise InputError(f"{name} needs Q (..., Nq, D) and K, V (..., Nk, D), K and V of one shape, all with one D "
                         f"and the same leading dims; got {shapes}")
    if k.shape[-2] == 0:
        raise InputError(f"{name}: attention over zero keys is undefined (K and V have no rows)")
    if not 1 <= q.shape[-1] <= max_head_dim:
        raise InputError(f"{name}: the head dim D must be between 1 and {max_head_dim} (1..{max_head_dim}); "
                         f"got D = {q.shape[-1]}")
    if dtypes is not None and (q.dtype not in dtypes or k.dtype != q.dtype or v.dtype != q.dtype):
        names = [str(d).removeprefix("torch.") for d in dtypes]
        allowed = ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]
        raise InputError(f"{name}: q, k, v must share one dtype among {allowed}; got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise InputError(f"{name}: q, k, v are on different devices ({q.device}, {k.device}, {v.device})")


def as_float32_array(x: Any, name: str) -> np.ndarray:
    """``x`` as a contiguous float32 NumPy array on the CPU (what the CPU runtime's kernels read)."""
    if not isinstance(x, torch.Tensor):
        raise InputError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x.detach().to("cpu", torch.float32).contiguous().numpy()


def backward_arrays(q, k, v, o, lse, do) -> list[np.ndarray]:
    """Q, K, V, O, LSE, dO of one head as float32 arrays, after checking that their shapes match."""
    arrays = [as_float32_array(t, n) for t, n in ((q, "q"), (k, "k"), (v, "v"), (o, "o"), (lse, "lse"), (do, "do"))]
    qa, ka, va, oa, la, da = arrays
    shapes = ", ".join(str(tuple(a.shape)) for a in arrays)
    if not (all(a.ndim == 2 for a in (qa, ka, va, oa, da)) and la.ndim == 1):
        raise InputError(f"the backward kernels take one head: Q, O, dO (Nq, D), K, V (Nk, D) and LSE (Nq,); "
                         f"got shapes {shapes}.")
    if not (ka.shape == va.shape and qa.shape[1] == ka.shape[1] and oa.shape == qa.shape and da.shape == qa.shape
            and la.shape == qa.shape[:1]):
        raise InputError(f"need Q, O, dO (Nq, D), K, V (Nk, D) and LSE (Nq,) of matching sizes; got shapes {shapes}.")
    if ka.shape[0] == 0:
        raise InputError("attention over zero keys is undefined")
    return arrays


@dataclass(frozen=True)
class Tiles:
    """Tile sizes of a launch: ``block_m`` query rows per block, ``block_n`` keys per K/V tile."""

    block_m: int
    block_n: int = 0


def blocks_for(n: int, per_block: int) -> int:
    """Blocks needed to cover ``n`` rows, ``per_block`` at a time (the last one may be partial)."""
    return max(1, -(-n // per_block))


def kernel_defines(module: Any, names: Sequence[str]) -> dict[str, int]:
    """The numbers a kernel file ``#define``s for ``names`` (tile sizes, limits), so that a launcher sizes
    its launches from the file itself and the two cannot disagree."""
    found = {}
    for name in names:
        m = re.search(rf"^[ \t]*#define[ \t]+{name}[ \t]+\(?(\d+)\)?", module.code, flags=re.M)
        if m is None:
            raise CourseError(f"{module.display_path} has no `#define {name} <number>`; the launcher sizes its "
                              f"launches from {', '.join(names)}.")
        found[name] = int(m.group(1))
    return found
