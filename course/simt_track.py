"""The CUDA C and Metal kernels of the course, and the one host-side launcher they share.

A CUDA or Metal kernel is a ``course.simt.RawModule`` (compiled from ``kernels/cuda/*.cu``,
``kernels/metal/*.metal`` or from a notebook's ``%%cuda`` / ``%%metal`` cell). The functions here turn
one into ``fn(q, k, v, scale=None) -> o``, the shape every attention check takes: they check the
inputs, size the grid, and launch on the CPU runtime with the checking modes a grader wants.

    STEPS["01.naive_cuda"] -> Step("kernels/cuda/01_naive.cu", "naive_attention", ...)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from .errors import CourseError
from .kernels import kernel_path
from .simt import RawModule

__all__ = ["Step", "STEPS", "module_for", "attention_function", "GRADING_LAUNCH", "MAX_HEAD_DIM"]

MAX_HEAD_DIM = 128
THREADS_PER_BLOCK = 64

# How checks launch a learner's kernel: every access bounds-checked and race-checked, threads and
# blocks in a seeded random order. (A kernel that is right passes in any order.)
GRADING_LAUNCH: dict[str, Any] = dict(check=("memcheck", "racecheck"), schedule="random")


@dataclass(frozen=True)
class Step:
    kernel_file: str   # repo-relative
    kernel: str        # the kernel function's name
    language: str      # "cuda" or "metal"


STEPS: dict[str, Step] = {
    "01.naive_cuda": Step("kernels/cuda/01_naive.cu", "naive_attention", "cuda"),
    "01.naive_metal": Step("kernels/metal/01_naive.metal", "naive_attention", "metal"),
}


def module_for(exercise: str) -> RawModule:
    """The reference kernel file of an exercise, compiled for the CPU runtime."""
    return RawModule(path=kernel_path(STEPS[exercise].kernel_file))


def _as_float32_rows(x: torch.Tensor, name: str) -> np.ndarray:
    if not isinstance(x, torch.Tensor):
        raise CourseError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise CourseError(f"{name} must be a matrix (N, D); got shape {tuple(x.shape)}")
    return x.detach().to("cpu", torch.float32).contiguous().numpy()


def naive_attention(module: RawModule, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    scale: float | None = None, **launch: Any) -> torch.Tensor:
    """softmax(scale · Q Kᵀ) V with lesson 01's kernel: one thread per query row, 64 per block.

    The kernel computes in float32; inputs of another dtype are converted, and O comes back in q's dtype.
    """
    qa, ka, va = (_as_float32_rows(t, n) for t, n in ((q, "q"), (k, "k"), (v, "v")))
    if ka.shape != va.shape or qa.shape[1] != ka.shape[1]:
        raise CourseError(f"need Q (Nq, D) and K, V (Nk, D); got {qa.shape}, {ka.shape}, {va.shape}")
    n_q, d = qa.shape
    n_k = ka.shape[0]
    if n_k == 0:
        raise CourseError("attention over zero keys is undefined")
    if d > MAX_HEAD_DIM:
        raise CourseError(f"the naive kernel keeps a row of O in a {MAX_HEAD_DIM}-float array; D = {d} is too large")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    o = np.zeros_like(qa)
    if n_q:
        blocks = (n_q + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
        kernel = module.get_function("naive_attention")
        kernel((blocks,), (THREADS_PER_BLOCK,), (qa, ka, va, o, n_q, n_k, d, scale), **launch)
    return torch.from_numpy(o).to(q.dtype)


def attention_function(module: RawModule, **launch: Any) -> Callable[..., torch.Tensor]:
    """``fn(q, k, v, scale=None)`` running lesson 01's kernel from ``module`` with these launch options."""
    if not isinstance(module, RawModule):
        raise CourseError(f"expected a compiled kernel module (from a %%cuda or %%metal cell, or "
                          f"course.simt.RawModule), got {type(module).__name__}")
    return lambda q, k, v, scale=None: naive_attention(module, q, k, v, scale, **launch)
