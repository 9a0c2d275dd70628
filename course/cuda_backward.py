"""Host side of lesson 07 in CUDA C: launching the backward kernels on the CPU SIMT runtime.

    module = RawModule(path="kernels/cuda/07_backward_atomic.cu")
    dq, dk, dv = backward_atomic(module, q, k, v, o, lse, do, causal=True)

Both functions take the forward's O and its natural-log LSE (float32, one per query row, -inf for a
row that sees no key) and return (dQ, dK, dV) in the dtypes of q, k and v; the kernels compute in
float32. ``**launch`` goes to every kernel launch (``check=``, ``schedule=``, ``seed=``, ``workers=``,
``timeout=``; see ``course.simt.RawKernel``), e.g. ``**course.simt_track.GRADING_LAUNCH``.

Block sizes are read from the module's own ``#define``s (BLOCK_M, BLOCK_N, THREADS, MAX_HEAD_DIM),
so a kernel file and its launch cannot disagree; :func:`plan` turns them into grids and shared
memory sizes, all in one place, and refuses a launch a GPU would refuse.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .errors import CourseError
from .kernels import kernel_path
from .simt import RawModule
from .simt_track import kernel_defines

__all__ = ["FILES", "module_for", "Plan", "plan", "backward_atomic", "backward_split", "SHARED_LIMIT",
           "THREADS_LIMIT"]

FILES = {"atomic": "kernels/cuda/07_backward_atomic.cu", "split": "kernels/cuda/07_backward_split.cu"}
KERNELS = {"atomic": ("backward_delta", "backward_dkdv_dq_atomic"),
           "split": ("backward_delta", "backward_dkdv", "backward_dq")}

# What any CUDA GPU gives one block without asking: 48 KiB of shared memory (more needs an opt-in
# per kernel, up to 227 KiB on an H100, which these kernels do not need for D <= 128) and 1024 threads.
SHARED_LIMIT = 48 * 1024
THREADS_LIMIT = 1024
_CONSTANTS = ("BLOCK_M", "BLOCK_N", "THREADS", "MAX_HEAD_DIM")
_FLOAT = 4


def module_for(kind: str) -> RawModule:
    """The course's kernel file for ``kind`` ("atomic" or "split"), compiled for the CPU runtime."""
    return RawModule(path=kernel_path(FILES[kind]))


def _constants(module: RawModule) -> dict[str, int]:
    return kernel_defines(module, _CONSTANTS)


@dataclass(frozen=True)
class Plan:
    """Every launch dimension of the backward kernels for one problem size."""
    threads: int            # per block, every kernel
    delta_blocks: int       # backward_delta: one warp per query row
    kv_blocks: int          # dK/dV kernels: one block per BLOCK_N keys
    q_blocks: int           # backward_dq: one block per BLOCK_M query rows
    kv_shared: int          # bytes of dynamic shared memory, dK/dV kernels
    q_shared: int           # bytes, backward_dq


def plan(n_q: int, n_k: int, d: int, constants: dict[str, int]) -> Plan:
    """Grids and shared memory for the kernels, or a CourseError saying which limit a GPU would hit."""
    bm, bn, threads, max_d = (constants[c] for c in _CONSTANTS)
    if d > max_d:
        raise CourseError(f"D = {d} is too large: these kernels keep per-thread dK/dV columns in registers "
                          f"sized for D <= {max_d}")
    if threads > THREADS_LIMIT or threads % 32:
        raise CourseError(f"THREADS = {threads}: a block is a whole number of warps, at most {THREADS_LIMIT} threads")
    # Layout of the dK/dV kernels: K, V tiles; Q, dO tiles; P, dS tiles; LSE, Δ (see the .cu files).
    kv_floats = 2 * bn * d + 2 * bm * d + 2 * bm * bn + 2 * bm
    q_floats = 2 * bn * d + 2 * bm * d + bm * bn + 2 * bm  # backward_dq keeps no P tile
    for what, floats in (("the dK/dV kernel", kv_floats), ("backward_dq", q_floats)):
        if floats * _FLOAT > SHARED_LIMIT:
            raise CourseError(f"{what} would need {floats * _FLOAT} bytes of shared memory per block at D = {d} "
                              f"(BLOCK_M = {bm}, BLOCK_N = {bn}); a GPU gives {SHARED_LIMIT} without an opt-in")
    warps = threads // 32
    return Plan(threads=threads, delta_blocks=math.ceil(n_q / warps), kv_blocks=math.ceil(n_k / bn),
                q_blocks=math.ceil(n_q / bm), kv_shared=kv_floats * _FLOAT, q_shared=q_floats * _FLOAT)


def _rows(x: Any, name: str) -> np.ndarray:
    if not isinstance(x, torch.Tensor):
        raise CourseError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x.detach().to("cpu", torch.float32).contiguous().numpy()


def _inputs(q, k, v, o, lse, do):
    arrays = [_rows(t, n) for t, n in ((q, "q"), (k, "k"), (v, "v"), (o, "o"), (lse, "lse"), (do, "do"))]
    qa, ka, va, oa, la, da = arrays
    if any(a.ndim != 2 for a in (qa, ka, va, oa, da)) or la.ndim != 1:
        raise CourseError("these kernels take one head: Q, O, dO (Nq, D), K, V (Nk, D) and LSE (Nq,); got shapes "
                          + ", ".join(str(a.shape) for a in arrays))
    if ka.shape != va.shape or qa.shape[1] != ka.shape[1] or oa.shape != qa.shape or da.shape != qa.shape \
            or la.shape != qa.shape[:1]:
        raise CourseError("need Q, O, dO (Nq, D), K, V (Nk, D) and LSE (Nq,); got shapes "
                          + ", ".join(str(a.shape) for a in arrays))
    if ka.shape[0] == 0:
        raise CourseError("attention over zero keys is undefined")
    return arrays


def _backward(kind: str, module: RawModule, q, k, v, o, lse, do, causal: bool, scale: float | None,
              launch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if not isinstance(module, RawModule):
        raise CourseError(f"expected a compiled kernel module (a %%cuda cell or course.simt.RawModule), "
                          f"got {type(module).__name__}")
    qa, ka, va, oa, la, da = _inputs(q, k, v, o, lse, do)
    n_q, d = qa.shape
    n_k = ka.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    p = plan(n_q, n_k, d, _constants(module))
    kernels = [module.get_function(name) for name in KERNELS[kind]]
    dq = np.zeros_like(qa)  # the atomic kernel only adds to it
    dk, dv = np.zeros_like(ka), np.zeros_like(va)
    if n_q:
        delta = np.empty(n_q, dtype=np.float32)
        kernels[0](p.delta_blocks, p.threads, (oa, da, delta, n_q, d), **launch)
        shape = (n_q, n_k, d, np.float32(scale), int(bool(causal)))
        if kind == "atomic":
            kernels[1](p.kv_blocks, p.threads, (qa, ka, va, da, la, delta, dq, dk, dv, *shape), p.kv_shared, **launch)
        else:
            kernels[1](p.kv_blocks, p.threads, (qa, ka, va, da, la, delta, dk, dv, *shape), p.kv_shared, **launch)
            kernels[2](p.q_blocks, p.threads, (qa, ka, va, da, la, delta, dq, *shape), p.q_shared, **launch)
    return (torch.from_numpy(dq).to(q.dtype), torch.from_numpy(dk).to(k.dtype), torch.from_numpy(dv).to(v.dtype))


def backward_atomic(module: RawModule, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                    lse: torch.Tensor, do: torch.Tensor, causal: bool = False, scale: float | None = None,
                    **launch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV) with 07_backward_atomic.cu: Δ, then one kernel for dK, dV and (by atomicAdd) dQ."""
    return _backward("atomic", module, q, k, v, o, lse, do, causal, scale, launch)


def backward_split(module: RawModule, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                   lse: torch.Tensor, do: torch.Tensor, causal: bool = False, scale: float | None = None,
                   **launch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV) with 07_backward_split.cu: Δ, a dK/dV kernel, and an atomic-free dQ kernel."""
    return _backward("split", module, q, k, v, o, lse, do, causal, scale, launch)
