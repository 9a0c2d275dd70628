"""The CUDA C and Metal kernels of the course, and the one host-side launcher they share.

A CUDA or Metal kernel is a ``course.simt.RawModule`` (compiled from ``kernels/cuda/*.cu``,
``kernels/metal/*.metal`` or from a notebook's ``%%cuda`` / ``%%metal`` cell). The functions here turn
one into ``fn(q, k, v, scale=None)``, the shape every attention check takes: they check the inputs,
choose the tile sizes, size the grid and the dynamic shared memory (checked against the device's
limit), and launch on the CPU runtime with the checking modes a grader wants, or on a GPU through a
``runner`` (``course.tools.bench_cuda`` passes one built on ``course.simt.gpu.launch_cuda``).

    STEPS["01.naive_cuda"] -> Step("kernels/cuda/01_naive.cu", "naive_attention", "cuda")
    fn = attention_function(module_for("03.tiled_cuda"))      # fn(q, k, v, scale=None) -> (o, lse)

Every number a launch needs comes from :func:`forward_config` (grid, block, shared memory for a step,
a problem size and a :class:`Tiles`); the kernels carve their shared memory with the same formulas,
and memcheck reports any disagreement as an out-of-bounds access of shared memory. Other launchers
(the backward kernels) build on :class:`Tiles`, :class:`LaunchConfig`, :func:`check_shared_memory`,
:func:`blocks_for` and :func:`kernel_tensors`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from course.errors import CourseError
from course.kernels import kernel_path
from course.simt import RawModule
from course.simt.limits import MAX_DYNAMIC_SHARED, MAX_THREADS_PER_BLOCK, STATIC_SHARED_LIMIT, WARP
from course.tracks.common import (GRADING_LAUNCH, Tiles, as_float32_array, backward_arrays, blocks_for, check_qkv,
                                  kernel_defines, need)
from course.tracks import table
from course.tracks.table import KernelExercise

__all__ = ["Step", "STEPS", "Tiles", "LaunchConfig", "module_for", "attention_function", "naive_attention",
           "forward", "forward_config", "shared_memory_bytes", "check_shared_memory", "blocks_for",
           "kernel_tensors", "step_for_module", "GRADING_LAUNCH", "MAX_HEAD_DIM", "WARP",
           "SHARED_MEMORY_LIMIT"]

MAX_HEAD_DIM = 128
THREADS_PER_BLOCK = 64  # lesson 01: one thread per row
SHARED_MEMORY_LIMIT = MAX_DYNAMIC_SHARED["cuda"]  # bytes of dynamic shared memory one block may have (H100)

@dataclass(frozen=True)
class Step:
    kernel_file: str   # repo-relative
    kernel: str        # the kernel function's name
    language: str      # "cuda" or "metal"
    layout: str = "naive"
    """How the launcher lays out the grid and shared memory: a key of ``_LAYOUTS``."""
    tiles: Tiles | None = None     # the default tile sizes
    writes_lse: bool = False       # the kernel writes LSE (the launcher then returns (o, lse))
    causal: bool = False           # the kernel takes a causal flag
    half_inputs: bool = False      # Q, K, V go in as float16 (tensor cores); O and LSE come out as float32
    d_multiple: int = 1            # D must be a multiple of this


def _launch_step(row: KernelExercise) -> Step:
    o = row.options
    return Step(row.kernel_file, row.entry[0], row.track, o.get("layout", "naive"),
                Tiles(*o["tiles"]) if "tiles" in o else None, o.get("writes_lse", False), o.get("causal", False),
                o.get("half_inputs", False), o.get("d_multiple", 1))


# The forward steps of CUDA C, and the Metal steps with one thread per row (lessons 01 and 02: the same
# launch as CUDA's lesson 01), from the table.
STEPS: dict[str, Step] = {row.id: _launch_step(row) for row in table.exercises(track="cuda") if not row.backward}
STEPS.update({row.id: _launch_step(row) for row in table.exercises(track="metal") if row.options.get("layout") == "naive"})


def module_for(exercise: str) -> RawModule:
    """The reference kernel file of an exercise, compiled for the CPU runtime."""
    return RawModule(path=kernel_path(STEPS[exercise].kernel_file))


def step_for_module(module: RawModule) -> str:
    """The exercise whose kernel ``module`` defines (by the kernel's name and the module's language)."""
    found = [name for name, s in STEPS.items() if s.language == module.language and s.kernel in module.kernels]
    if len(found) != 1:
        wanted = ", ".join(f"`{s.kernel}`" for s in STEPS.values() if s.language == module.language)
        have = ", ".join(f"`{k}`" for k in sorted(module.kernels)) or "none"
        raise CourseError(f"cannot tell which step these kernels are for: the module defines {have}; "
                          f"the steps' kernels are {wanted}")
    return found[0]


# ------------------------------------------------------------------------------------------------
# Launch geometry: grid, block and shared memory, in one place
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LaunchConfig:
    grid: tuple[int, int]       # (blocks along the query rows, heads)
    block: tuple[int]           # threads per block
    shared_mem: int             # bytes of dynamic (`extern __shared__`) memory
    tiles: Tiles


def check_shared_memory(nbytes: int, what: str, limit: int = SHARED_MEMORY_LIMIT) -> int:
    """``nbytes`` if a block may have that much dynamic shared memory; a CourseError saying why not otherwise."""
    need(nbytes <= limit, f"{what} needs {nbytes:,} bytes of shared memory per block, more than the {limit:,} bytes "
                          f"({limit // 1024} KiB) a block may have: use smaller tiles.")
    return nbytes


def _warp_rows(tiles: Tiles, d: int, needs_n: bool) -> int:
    """One warp per query row (steps 02-04): the block has 32 * block_m threads."""
    need(1 <= tiles.block_m <= MAX_THREADS_PER_BLOCK // WARP,
         f"block_m = {tiles.block_m}: one warp per query row allows 1 to {MAX_THREADS_PER_BLOCK // WARP} rows "
         f"per block ({MAX_THREADS_PER_BLOCK} threads)")
    if needs_n:
        need(tiles.block_n >= WARP and tiles.block_n % WARP == 0,
             f"block_n = {tiles.block_n}: a K/V tile is walked 32 keys at a time, so block_n must be a positive "
             f"multiple of 32")
    return WARP * tiles.block_m


# Padding of shared-memory rows, as the kernels use it (in elements).
K_PAD_TILED = 1       # 03: lane j reads K row j, d + 1 floats apart: 32 different banks
K_PAD_FLOAT4 = 4      # 04: rows stay 16-byte aligned for float4, and 8 lanes' float4s cover 32 banks
HALF_PAD = 8          # 05-06: half rows padded by 16 bytes (wmma's ldm must be a multiple of 8 halves)
FLOAT_PAD = 4         # 05-06: float rows padded by 16 bytes (ldm a multiple of 4 floats)


def shared_memory_bytes(layout: str, tiles: Tiles, d: int) -> int:
    """Bytes of dynamic shared memory a block of ``layout`` needs (the kernels carve it the same way)."""
    m, n = tiles.block_m, tiles.block_n
    if layout in ("naive", "warp_per_row"):
        return 0
    if layout == "tiled":  # Q tile, one K tile (padded rows), one V tile; float
        return 4 * (m * d + n * (d + K_PAD_TILED) + n * d)
    if layout == "double_buffer":  # Q tile, two K tiles (padded), two V tiles; float
        return 4 * (m * d + 2 * n * (d + K_PAD_FLOAT4) + 2 * n * d)
    if layout == "wmma":
        warps = m // 16
        halves = (m + 4 * n) * (d + HALF_PAD)              # Q tile; K and V tiles, two of each
        strips = warps * 16 * ((n + FLOAT_PAD) * 4         # each warp's S strip (float)
                               + (n + HALF_PAD) * 2        # its P strip (half)
                               + (d + FLOAT_PAD) * 4)      # its O strip, where the accumulator is rescaled
        return 2 * halves + strips
    raise CourseError(f"unknown launch layout {layout!r}")


def forward_config(exercise: str, n_q: int, n_k: int, d: int, heads: int = 1, tiles: Tiles | None = None
                   ) -> LaunchConfig:
    """Grid, block and shared memory for ``exercise`` on (heads, n_q, d) queries and (heads, n_k, d) keys."""
    step = STEPS[exercise]
    tiles = tiles or step.tiles
    need(tiles is not None, f"{exercise} has no tile sizes")
    layout = step.layout
    if layout == "warp_per_row":
        threads = _warp_rows(tiles, d, needs_n=False)
    elif layout in ("tiled", "double_buffer"):
        threads = _warp_rows(tiles, d, needs_n=True)
    elif layout == "wmma":
        need(tiles.block_m % 16 == 0 and 16 <= tiles.block_m <= 16 * MAX_THREADS_PER_BLOCK // WARP,
             f"block_m = {tiles.block_m}: each warp owns 16 query rows (one wmma tile), so block_m must be a "
             f"multiple of 16 from 16 to {16 * MAX_THREADS_PER_BLOCK // WARP}")
        need(tiles.block_n >= 16 and tiles.block_n % 16 == 0,
             f"block_n = {tiles.block_n}: K/V tiles are multiplied 16 keys at a time, so block_n must be a "
             f"positive multiple of 16")
        threads = WARP * tiles.block_m // 16
    else:
        raise CourseError(f"{exercise}: unknown launch layout {layout!r}")
    nbytes = check_shared_memory(shared_memory_bytes(layout, tiles, d),
                                 f"{exercise} with block_m = {tiles.block_m}, block_n = {tiles.block_n} and D = {d}")
    return LaunchConfig(grid=(blocks_for(n_q, tiles.block_m), heads), block=(threads,), shared_mem=nbytes,
                        tiles=tiles)


# ------------------------------------------------------------------------------------------------
# Inputs and outputs
# ------------------------------------------------------------------------------------------------

def _as_float32_rows(x: torch.Tensor, name: str) -> np.ndarray:
    array = as_float32_array(x, name)
    need(array.ndim == 2, f"{name} must be a matrix (N, D); got shape {tuple(x.shape)}")
    return array


def kernel_tensors(exercise: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[int, ...]]:
    """Q, K, V as the step's kernel reads them: (H, N, D), contiguous, in its input dtype, on their device.

    Also checks the shapes and the head dim against what the step's kernel supports; returns the
    leading (batch, head) dims too, to shape the outputs.
    """
    step = STEPS[exercise]
    check_qkv(exercise, q, k, v, dtypes=None)
    d = q.shape[-1]
    if d > MAX_HEAD_DIM:
        raise CourseError(f"{exercise} keeps a row of O in registers, {MAX_HEAD_DIM} columns at most; "
                          f"D = {d} is too large")
    if d % step.d_multiple:
        why = {4: "it moves rows as float4 vectors of 4 floats",
               16: "tensor cores multiply 16 x 16 x 16 tiles"}.get(step.d_multiple, "of how it tiles D")
        raise CourseError(f"{exercise} needs D to be a multiple of {step.d_multiple}, because {why}; D = {d} is not")
    dtype = torch.float16 if step.half_inputs else torch.float32
    lead = tuple(q.shape[:-2])
    flat = tuple(t.detach().to(dtype).reshape(-1, t.shape[-2], d).contiguous() for t in (q, k, v))
    return flat[0], flat[1], flat[2], lead


Runner = Callable[[str, tuple, tuple, tuple, int], Any]
"""``runner(kernel_name, grid, block, args, shared_mem)``: launches on some device (default: the CPU runtime)."""


def forward(exercise: str, module: RawModule | None, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            scale: float | None = None, causal: bool = False, tiles: Tiles | None = None,
            runner: Runner | None = None, **launch: Any):
    """Run step ``exercise``'s forward kernel from ``module``: O, or (O, LSE) for steps that write LSE.

    O comes back in q's dtype (the kernels compute in float32; the tensor-core steps read float16),
    LSE in float32 with shape (..., Nq). ``launch`` holds the CPU runtime's options (check, schedule,
    seed, timeout); ``runner`` replaces the CPU runtime (then ``module`` may be None).
    """
    step = STEPS[exercise]
    if causal and not step.causal:
        raise CourseError(f"{exercise} has no causal mask; causal attention is step 06")
    qh, kh, vh, lead = kernel_tensors(exercise, q, k, v)
    heads, n_q, d = qh.shape
    n_k = kh.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    cfg = forward_config(exercise, n_q, n_k, d, heads, tiles)
    # Outputs start as NaN, as a GPU's fresh memory holds garbage: an element the kernel never writes fails
    # the check instead of passing as a 0 (a row that sees no key must be written as O = 0, LSE = -inf).
    o = torch.full((heads, n_q, d), float("nan"), dtype=torch.float32, device=qh.device)
    lse = torch.full((heads, n_q), float("nan"), dtype=torch.float32, device=qh.device)
    args: tuple = (qh, kh, vh, o)
    if step.writes_lse:
        args += (lse,)
    args += (n_q, n_k, d, scale)
    if step.layout != "warp_per_row":
        args += (cfg.tiles.block_n,)
    if step.causal:
        args += (int(bool(causal)),)
    if n_q:
        if runner is None:
            kernel = module.get_function(step.kernel)  # type: ignore[union-attr]
            kernel(cfg.grid, cfg.block, args, shared_mem=cfg.shared_mem, **launch)
        else:
            runner(step.kernel, cfg.grid, cfg.block, args, cfg.shared_mem)
    out = o.reshape(*lead, n_q, d).to(q.dtype)
    return (out, lse.reshape(*lead, n_q)) if step.writes_lse else out


def naive_attention(module: RawModule, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    scale: float | None = None, *, kernel: str = "naive_attention", **launch: Any) -> torch.Tensor:
    """softmax(scale · Q Kᵀ) V with a one-thread-per-row kernel, 64 threads per block: lesson 01's
    ``naive_attention`` by default, or ``kernel`` (Metal's lesson 02, ``online_attention``), which takes
    the same arguments.

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
        raise CourseError(f"`{kernel}` keeps a row of O in a {MAX_HEAD_DIM}-float array; D = {d} is too large")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    o = np.full_like(qa, np.nan)  # never written by the kernel: fails the check (see forward)
    if n_q:
        blocks = (n_q + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
        function = module.get_function(kernel)
        function((blocks,), (THREADS_PER_BLOCK,), (qa, ka, va, o, n_q, n_k, d, scale), **launch)
    return torch.from_numpy(o).to(q.dtype)


def attention_function(module: RawModule, exercise: str | None = None, tiles: Tiles | None = None,
                       **launch: Any) -> Callable[..., Any]:
    """The attention function of ``module``'s step, launching with these options.

    One thread per row (lesson 01, and Metal's lesson 02): ``fn(q, k, v, scale=None) -> o``; steps that
    write LSE return ``(o, lse)``; step 06 takes ``causal=`` too. Unless ``exercise`` names the step, it is
    the one whose kernel the module defines, and lesson 01 when there is no such step (the launch then
    says which kernel is missing).
    """
    if not isinstance(module, RawModule):
        raise CourseError(f"expected a compiled kernel module (from a %%cuda or %%metal cell, or "
                          f"course.simt.RawModule), got {type(module).__name__}")
    if exercise is None:
        try:
            exercise = step_for_module(module)
        except CourseError:
            exercise = table.ladder_baseline(module.language).id  # the one-thread-per-row launch of its track
    if STEPS[exercise].layout == "naive":
        kernel = STEPS[exercise].kernel
        return lambda q, k, v, scale=None: naive_attention(module, q, k, v, scale, kernel=kernel, **launch)
    if STEPS[exercise].causal:
        return lambda q, k, v, causal=False, scale=None: forward(exercise, module, q, k, v, scale, causal, tiles,
                                                                 **launch)
    return lambda q, k, v, scale=None: forward(exercise, module, q, k, v, scale, False, tiles, **launch)


# ------------------------------------------------------------------------------------------------
# Lesson 07: the backward kernels
#
#     dq, dk, dv = backward_atomic(backward_module_for("atomic"), q, k, v, o, lse, do, causal=True)
#
# Both take the forward's O and its natural-log LSE (float32, one per query row, -inf for a row that
# sees no key) and return (dQ, dK, dV) in the dtypes of q, k and v; the kernels compute in float32.
# ``**launch`` goes to every kernel launch (check=, schedule=, seed=, workers=, timeout=), e.g.
# ``**GRADING_LAUNCH``. Block sizes are read from the module's own #defines (BLOCK_M, BLOCK_N, THREADS,
# MAX_HEAD_DIM), so a kernel file and its launch cannot disagree; backward_plan turns them into grids
# and shared memory sizes and refuses a launch a GPU would refuse.
# ------------------------------------------------------------------------------------------------

BACKWARD_FILES = {row.variant: row.kernel_file for row in table.exercises(track="cuda") if row.backward}
BACKWARD_KERNELS = {row.variant: row.entry for row in table.exercises(track="cuda") if row.backward}

# The backward kernels stay within what any CUDA GPU gives one block without opting in (48 KiB of
# shared memory; they do not need more for D <= 128).
BACKWARD_SHARED_LIMIT = STATIC_SHARED_LIMIT
_CONSTANTS = ("BLOCK_M", "BLOCK_N", "THREADS", "MAX_HEAD_DIM")
_FLOAT = 4


def backward_module_for(kind: str) -> RawModule:
    """The course's backward kernel file for ``kind`` ("atomic" or "split"), compiled for the CPU runtime."""
    return RawModule(path=kernel_path(BACKWARD_FILES[kind]))


def backward_constants(module: RawModule) -> dict[str, int]:
    return kernel_defines(module, _CONSTANTS)


@dataclass(frozen=True)
class BackwardPlan:
    """Every launch dimension of the backward kernels for one problem size."""
    threads: int            # per block, every kernel
    delta_blocks: int       # backward_delta: one warp per query row
    kv_blocks: int          # dK/dV kernels: one block per BLOCK_N keys
    q_blocks: int           # backward_dq: one block per BLOCK_M query rows
    kv_shared: int          # bytes of dynamic shared memory, dK/dV kernels
    q_shared: int           # bytes, backward_dq


def backward_plan(n_q: int, n_k: int, d: int, constants: dict[str, int]) -> BackwardPlan:
    """Grids and shared memory for the kernels, or a CourseError saying which limit a GPU would hit."""
    bm, bn, threads, max_d = (constants[c] for c in _CONSTANTS)
    if d > max_d:
        raise CourseError(f"D = {d} is too large: these kernels keep per-thread dK/dV columns in registers "
                          f"sized for D <= {max_d}")
    if threads > MAX_THREADS_PER_BLOCK or threads % WARP:
        raise CourseError(f"THREADS = {threads}: a block is a whole number of warps, at most "
                          f"{MAX_THREADS_PER_BLOCK} threads")
    # Layout of the dK/dV kernels: K, V tiles; Q, dO tiles; P, dS tiles; LSE, Δ (see the .cu files).
    kv_floats = 2 * bn * d + 2 * bm * d + 2 * bm * bn + 2 * bm
    q_floats = 2 * bn * d + 2 * bm * d + bm * bn + 2 * bm  # backward_dq keeps no P tile
    for what, floats in (("the dK/dV kernel", kv_floats), ("backward_dq", q_floats)):
        check_shared_memory(floats * _FLOAT, f"{what} at D = {d} (BLOCK_M = {bm}, BLOCK_N = {bn}, no opt-in)",
                            BACKWARD_SHARED_LIMIT)
    warps = threads // WARP
    return BackwardPlan(threads=threads, delta_blocks=math.ceil(n_q / warps), kv_blocks=math.ceil(n_k / bn),
                        q_blocks=math.ceil(n_q / bm), kv_shared=kv_floats * _FLOAT, q_shared=q_floats * _FLOAT)


def _backward(kind: str, module: RawModule, q, k, v, o, lse, do, causal: bool, scale: float | None,
              launch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if not isinstance(module, RawModule):
        raise CourseError(f"expected a compiled kernel module (a %%cuda cell or course.simt.RawModule), "
                          f"got {type(module).__name__}")
    qa, ka, va, oa, la, da = backward_arrays(q, k, v, o, lse, do)
    n_q, d = qa.shape
    n_k = ka.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    p = backward_plan(n_q, n_k, d, backward_constants(module))
    kernels = [module.get_function(name) for name in BACKWARD_KERNELS[kind]]
    # What a kernel must write starts as NaN (see forward); the atomic kernel only adds to dQ, which starts as 0.
    # With no query rows nothing is launched, and dK = dV = 0.
    unwritten = np.nan if n_q else 0.0
    dq = np.zeros_like(qa) if kind == "atomic" else np.full_like(qa, np.nan)
    dk, dv = np.full_like(ka, unwritten), np.full_like(va, unwritten)
    if n_q:
        delta = np.full(n_q, np.nan, dtype=np.float32)
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
