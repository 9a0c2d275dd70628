"""The Metal track (kernels/metal/03-07): one launch description, two places to run it.

Lessons 01 and 02 of Metal (one thread per query row, no threadgroup memory) launch exactly like CUDA's
lesson 01, through ``course.tracks.cuda`` (``STEPS["02.online_softmax_metal"]`` there).

    module = module_for("03.tiled_metal")                       # kernels/metal/03_tiled.metal
    o, lse = tiled_forward(module, q, k, v, causal=True)         # on the CPU runtime
    o, lse = tiled_forward(module, q, k, v, device="gpu")        # on a Mac's GPU (PyObjC)
    dq, dk, dv = backward_split(module_for("07.backward_split_metal"), q, k, v, o, lse, do)

Every launch is first written down as a :class:`Launch`: the kernel's name, its ``[[buffer(n)]]``
arguments in buffer order (arrays and scalars, by name), threadgroups per grid, threads per
threadgroup and the bytes of each ``[[threadgroup(n)]]`` buffer. The CPU runtime
(``course.simt.RawKernel``) and the GPU path (``course.simt.gpu.launch_metal``) are then handed the
very same object, so they cannot disagree. Before either runs, the description is compared with the
kernel's own parameter list: a kernel file whose buffers or threadgroup buffers are named or numbered
differently is refused with a sentence saying so, instead of silently receiving the wrong arrays.

Sizes a kernel fixes at compile time (``#define MAX_HEAD_DIM 128`` and the like) are read from the
module's source, and every launch a GPU would refuse is refused here first, in one sentence: a head
dim the kernel cannot hold, float4 rows when D is not a multiple of 4, 8 x 8 simdgroup matrices when
D is not a multiple of 8, more than 1024 threads per threadgroup, or threadgroup memory over the
32 KiB an Apple GPU gives one threadgroup.

``**launch`` holds the CPU runtime's options (``check=``, ``schedule=``, ``seed=``, ``workers=``,
``timeout=``), e.g. ``**course.tracks.common.GRADING_LAUNCH``; the GPU path takes none.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from course.errors import CourseError
from course.kernels import kernel_path
from course.simt import RawModule
from course.simt.compiler import KIND_THREADGROUP
from course.simt.limits import MAX_DYNAMIC_SHARED, MAX_THREADS_PER_BLOCK, WARP
from course.tracks.common import Tiles, backward_arrays, check_qkv, kernel_defines, need
from course.tracks import table

__all__ = ["Launch", "MetalStep", "STEPS", "THREADGROUP_MEMORY_LIMIT", "module_for", "kernel_constants",
           "forward_launch", "backward_launches", "tiled_forward", "float4_forward", "simdgroup_forward",
           "backward_atomic", "backward_split", "FORWARD", "BACKWARD", "forward_function", "backward_function"]

THREADGROUP_MEMORY_LIMIT = MAX_DYNAMIC_SHARED["metal"]  # 32 KiB: what an Apple GPU gives one threadgroup
SIMDGROUP = WARP  # an Apple SIMD-group has 32 threads, as a CUDA warp does
FLOAT, HALF = 4, 2


# ------------------------------------------------------------------------------------------------
# The description of a launch
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Launch:
    """One kernel launch, as both the CPU runtime and a Mac's GPU receive it."""

    kernel: str
    grid: tuple[int, int, int]                       # threadgroups per grid
    threadgroup: tuple[int, int, int]                # threads per threadgroup
    buffers: tuple[tuple[str, Any], ...]             # (name, array or scalar); position n is [[buffer(n)]]
    threadgroup_memory: tuple[tuple[str, int], ...]  # (name, bytes); position n is [[threadgroup(n)]]

    @property
    def args(self) -> tuple:
        return tuple(value for _, value in self.buffers)

    @property
    def threadgroup_bytes(self) -> tuple[int, ...]:
        return tuple(nbytes for _, nbytes in self.threadgroup_memory)

    @property
    def threads(self) -> int:
        return self.threadgroup[0] * self.threadgroup[1] * self.threadgroup[2]


def _bytes(n: int) -> int:
    """Metal sets threadgroup memory lengths in multiples of 16 bytes; the description holds what a GPU gets."""
    return -(-n // 16) * 16


def _make(kernel: str, grid: Sequence[int], threads: int, buffers: dict[str, Any], threadgroup: dict[str, int],
          what: str) -> Launch:
    dims = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
    if not 1 <= threads <= MAX_THREADS_PER_BLOCK:
        raise CourseError(f"{what} would need {threads} threads per threadgroup; a Metal threadgroup has 1 to "
                          f"{MAX_THREADS_PER_BLOCK}: use smaller tiles.")
    memory = tuple((name, _bytes(n)) for name, n in threadgroup.items())
    total = sum(n for _, n in memory)
    if total > THREADGROUP_MEMORY_LIMIT:
        raise CourseError(f"{what} needs {total:,} bytes of threadgroup memory per threadgroup, more than the "
                          f"{THREADGROUP_MEMORY_LIMIT:,} bytes (32 KiB) an Apple GPU gives one threadgroup: "
                          f"use smaller tiles.")
    return Launch(kernel, dims, (int(threads), 1, 1), tuple(buffers.items()), memory)  # type: ignore[arg-type]


def _verify(module: RawModule, launch: Launch) -> None:
    """Refuse a launch whose buffers or threadgroup buffers are not the ones the kernel declares."""
    if launch.kernel not in module.kernels:
        known = ", ".join(sorted(module.kernels)) or "none"
        raise CourseError(f"{module.display_path} has no kernel `{launch.kernel}` (kernels found: {known}).")
    decl = module.kernels[launch.kernel]
    declared = tuple(decl.params[i].name for i in decl.buffer_params)
    passed = tuple(name for name, _ in launch.buffers)
    if declared != passed:
        raise CourseError(f"`{launch.kernel}` declares its [[buffer(n)]] parameters as ({', '.join(declared)}) "
                          f"but the launcher passes ({', '.join(passed)}), in that order: keep the kernel's "
                          f"parameter list as the course gives it.")
    groups = sorted((p.index, p.name) for p in decl.params if p.kind == KIND_THREADGROUP)
    declared_tg = tuple(name for _, name in groups)
    passed_tg = tuple(name for name, _ in launch.threadgroup_memory)
    if declared_tg != passed_tg or [i for i, _ in groups] != list(range(len(groups))):
        raise CourseError(f"`{launch.kernel}` declares its [[threadgroup(n)]] buffers as ({', '.join(declared_tg)}) "
                          f"but the launcher sizes ({', '.join(passed_tg)}), numbered from 0: keep the kernel's "
                          f"parameter list as the course gives it.")


GpuLauncher = Callable[..., Any]
"""``launcher(source, kernel, grid, threadgroup, args, threadgroup_memory, *, path)``, like
``course.simt.gpu.launch_metal``."""


def _check_module(module: Any) -> None:
    if not isinstance(module, RawModule):
        raise CourseError(f"expected a compiled kernel module (a %%metal cell, module_for(...) or "
                          f"course.simt.RawModule), got {type(module).__name__}")
    if module.language != "metal":
        raise CourseError(f"{module.display_path} is a {module.language} module; the Metal track needs a .metal one")


def _run(module: RawModule, launches: Sequence[Launch], device: str, gpu_launcher: GpuLauncher | None,
         launch: dict[str, Any]) -> None:
    _check_module(module)
    if device not in ("cpu", "gpu"):
        raise CourseError(f"device must be 'cpu' (the CPU runtime) or 'gpu' (a Mac's GPU), got {device!r}")
    if device == "gpu" and launch:
        raise CourseError(f"{', '.join(sorted(launch))}: options of the CPU runtime; a GPU launch takes none.")
    for item in launches:
        _verify(module, item)
    if device == "gpu" and gpu_launcher is None:
        from course.simt.gpu import launch_metal  # PyObjC is imported there, only when a GPU launch happens
        gpu_launcher = launch_metal
    for item in launches:
        if device == "cpu":
            module.get_function(item.kernel)(item.grid, item.threadgroup, item.args,
                                             threadgroup_memory=item.threadgroup_bytes, **launch)
        else:
            gpu_launcher(module.code, item.kernel, item.grid, item.threadgroup, item.args,  # type: ignore[misc]
                         item.threadgroup_bytes, path=module.display_path)


# ------------------------------------------------------------------------------------------------
# The steps
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MetalStep:
    exercise: str
    kernel_file: str                 # repo-relative
    kernels: tuple[str, ...]         # in launch order
    constants: tuple[str, ...]       # the `#define`s the launcher reads from the source
    d_multiple: int = 1
    half_inputs: bool = False        # Q, K, V go in as float16 (simdgroup_half8x8); O, LSE come out float32
    layout: str = ""
    """How a forward step carves threadgroup memory and threads (``tiled``, ``ping_pong``, ``simdgroup``); empty for
    a backward step."""
    tile_choices: tuple[Tiles, ...] = ()
    """Tiles tried in order when none are given: the first that fits 32 KiB of threadgroup memory at this D."""
    variant: str = ""                # a backward step's dQ design: ``atomic`` or ``split``


def _metal_step(row: table.KernelExercise) -> MetalStep:
    o = row.options
    return MetalStep(row.id, row.kernel_file, row.entry, o["defines"], o.get("d_multiple", 1), o.get("half_inputs", False),
                     o.get("layout", ""), tuple(Tiles(*t) for t in o.get("tile_choices", ())), row.variant)


STEPS: dict[str, MetalStep] = {
    row.id: _metal_step(row) for row in table.exercises(track="metal")
    if row.options.get("layout") != "naive"}  # one thread per row (01, 02) launches like CUDA's 01 (course.tracks.cuda)


def _step_laid_out(layout: str) -> str:
    """The Metal forward step whose row declares ``layout``."""
    return next(step.exercise for step in STEPS.values() if step.layout == layout)


def _backward_step(variant: str) -> str:
    return next(step.exercise for step in STEPS.values() if not step.layout and step.variant == variant)


def module_for(exercise: str) -> RawModule:
    """The course's kernel file of a step, compiled for the CPU runtime."""
    return RawModule(path=kernel_path(STEPS[exercise].kernel_file))


def kernel_constants(module: RawModule, exercise: str) -> dict[str, int]:
    """The compile-time sizes the step's launcher needs, read from the module's `#define`s."""
    _check_module(module)
    return kernel_defines(module, STEPS[exercise].constants)


def _forward_memory(exercise: str, tiles: Tiles, d: int) -> dict[str, int]:
    """Bytes of each [[threadgroup(n)]] buffer of a forward step; the kernels carve them the same way."""
    m, n = tiles.block_m, tiles.block_n
    layout = STEPS[exercise].layout
    if layout == "tiled":
        return {"q_tile": FLOAT * m * d, "k_tile": FLOAT * n * d, "v_tile": FLOAT * n * d}
    if layout == "ping_pong":  # two K and two V buffers: the ping-pong pair
        return {"q_tile": FLOAT * m * d, "k_tiles": 2 * FLOAT * n * d, "v_tiles": 2 * FLOAT * n * d}
    # simdgroup: half Q, K, V tiles; per simdgroup an 8-row strip of S (float), of P (half) and of O (float),
    # where the O accumulator is spilled for its rescale.
    return {"q_tile": HALF * m * d, "k_tile": HALF * n * d, "v_tile": HALF * n * d,
            "s_strips": FLOAT * m * n, "p_strips": HALF * m * n, "o_strips": FLOAT * m * d}


def _check_tiles(exercise: str, tiles: Tiles, constants: dict[str, int]) -> int:
    """Threads per threadgroup for these tiles, or a CourseError saying what is wrong with them."""
    m, n = tiles.block_m, tiles.block_n
    if STEPS[exercise].layout == "simdgroup":
        need(m >= 8 and m % 8 == 0, f"block_m = {m}: each simdgroup owns 8 query rows (one 8 x 8 matrix), so "
                                    f"block_m must be a positive multiple of 8.")
        need(n >= 8 and n % 8 == 0, f"block_n = {n}: keys are multiplied 8 at a time, so block_n must be a "
                                    f"positive multiple of 8.")
        return SIMDGROUP * m // 8
    need(m >= 1, f"block_m = {m}: a threadgroup needs at least one query row.")
    need(1 <= n <= constants["MAX_BLOCK_N"], f"block_n = {n}: the kernel keeps one tile's scores in a thread array "
                                            f"of MAX_BLOCK_N = {constants['MAX_BLOCK_N']}, so 1 <= block_n <= "
                                            f"{constants['MAX_BLOCK_N']}.")
    return m


def _default_tiles(exercise: str, d: int) -> Tiles:
    choices = STEPS[exercise].tile_choices
    for tiles in choices:
        if sum(_bytes(b) for b in _forward_memory(exercise, tiles, d).values()) <= THREADGROUP_MEMORY_LIMIT:
            return tiles
    return choices[-1]  # the launch then says how much memory it would need


def _check_head_dim(exercise: str, d: int, constants: dict[str, int]) -> None:
    name = STEPS[exercise].kernel_file.rsplit("/", 1)[1]
    need(d <= constants["MAX_HEAD_DIM"], f"{name} keeps a row of O in a thread array of MAX_HEAD_DIM = "
                                         f"{constants['MAX_HEAD_DIM']} floats; D = {d} is too large.")
    multiple = STEPS[exercise].d_multiple
    why = {4: "moves rows as float4 vectors of 4 floats", 8: "multiplies 8 x 8 simdgroup matrices"}.get(multiple)
    need(d % multiple == 0, f"{name} {why}, so D must be a multiple of {multiple}; D = {d} is not.")


def _heads(exercise: str, q, k, v) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, ...]]:
    """Q, K, V as (H, N, D) contiguous arrays in the step's input dtype, and the leading dims."""
    check_qkv(exercise, q, k, v, dtypes=None)
    dtype = torch.float16 if STEPS[exercise].half_inputs else torch.float32
    d = q.shape[-1]
    arrays = tuple(t.detach().to("cpu", dtype).reshape(-1, t.shape[-2], d).contiguous().numpy() for t in (q, k, v))
    return arrays[0], arrays[1], arrays[2], tuple(q.shape[:-2])


def forward_launch(exercise: str, module: RawModule, q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray,
                   lse: np.ndarray, scale: float, causal: bool, tiles: Tiles | None = None) -> Launch:
    """The launch of a forward step on (H, Nq, D) queries and (H, Nk, D) keys, writing O and LSE."""
    heads, n_q, d = q.shape
    n_k = k.shape[1]
    constants = kernel_constants(module, exercise)
    _check_head_dim(exercise, d, constants)
    tiles = tiles or _default_tiles(exercise, d)
    threads = _check_tiles(exercise, tiles, constants)
    kernel = STEPS[exercise].kernels[0]
    buffers = dict(q=q, k=k, v=v, o=o, lse=lse, n_q=np.uint32(n_q), n_k=np.uint32(n_k), d=np.uint32(d),
                   scale=np.float32(scale), block_n=np.uint32(tiles.block_n), causal=np.uint32(bool(causal)))
    return _make(kernel, (math.ceil(n_q / tiles.block_m), heads), threads, buffers,
                 _forward_memory(exercise, tiles, d),
                 f"{kernel} with block_m = {tiles.block_m}, block_n = {tiles.block_n} and D = {d}")


def _forward(exercise: str, module: RawModule, q, k, v, causal: bool, scale: float | None, device: str,
             tiles: Tiles | None, gpu_launcher: GpuLauncher | None, launch: dict[str, Any]):
    qa, ka, va, lead = _heads(exercise, q, k, v)
    heads, n_q, d = qa.shape
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    # Outputs start as NaN, as a GPU's fresh memory holds garbage: an element the kernel never writes fails
    # the check instead of passing as a 0 (a row that sees no key must be written as O = 0, LSE = -inf).
    o = np.full((heads, n_q, d), np.nan, dtype=np.float32)
    lse = np.full((heads, n_q), np.nan, dtype=np.float32)
    item = forward_launch(exercise, module, qa, ka, va, o, lse, scale, causal, tiles)
    if n_q:
        _run(module, [item], device, gpu_launcher, launch)
    return (torch.from_numpy(o).reshape(*lead, n_q, d).to(q.dtype), torch.from_numpy(lse).reshape(*lead, n_q))


def tiled_forward(module: RawModule, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  scale: float | None = None, *, device: str = "cpu", tiles: Tiles | None = None,
                  gpu_launcher: GpuLauncher | None = None, **launch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(O, LSE) with 03_tiled.metal: float32, one thread per query row, K/V tiles in threadgroup memory."""
    return _forward(_step_laid_out("tiled"), module, q, k, v, causal, scale, device, tiles, gpu_launcher, launch)


def float4_forward(module: RawModule, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                   scale: float | None = None, *, device: str = "cpu", tiles: Tiles | None = None,
                   gpu_launcher: GpuLauncher | None = None, **launch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(O, LSE) with 04_double_buffer.metal: float4 rows, ping-pong K/V tiles (D a multiple of 4)."""
    return _forward(_step_laid_out("ping_pong"), module, q, k, v, causal, scale, device, tiles, gpu_launcher, launch)


def simdgroup_forward(module: RawModule, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                      scale: float | None = None, *, device: str = "cpu", tiles: Tiles | None = None,
                      gpu_launcher: GpuLauncher | None = None, **launch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(O, LSE) with 05_mma.metal: half inputs, 8 x 8 simdgroup matrices, float accumulators
    (D a multiple of 8). O comes back in q's dtype, LSE in float32."""
    return _forward(_step_laid_out("simdgroup"), module, q, k, v, causal, scale, device, tiles, gpu_launcher, launch)


_FORWARD_OF_LAYOUT = {"tiled": tiled_forward, "ping_pong": float4_forward, "simdgroup": simdgroup_forward}
FORWARD = {step.exercise: _FORWARD_OF_LAYOUT[step.layout] for step in STEPS.values() if step.layout}


# ------------------------------------------------------------------------------------------------
# Backward
# ------------------------------------------------------------------------------------------------

def _backward_memory(constants: dict[str, int], d: int, kernel: str) -> dict[str, int]:
    """Bytes of each [[threadgroup(n)]] buffer of a backward kernel (the .metal files list the same)."""
    bm, bn = constants["BLOCK_M"], constants["BLOCK_N"]
    tiles = {"k_tile": FLOAT * bn * d, "v_tile": FLOAT * bn * d, "q_tile": FLOAT * bm * d, "do_tile": FLOAT * bm * d}
    if kernel == "backward_dq":
        return tiles | {"ds_tile": FLOAT * bm * bn, "row_stats": 2 * FLOAT * bm}
    return tiles | {"p_tile": FLOAT * bm * bn, "ds_tile": FLOAT * bm * bn, "row_stats": 2 * FLOAT * bm}


def backward_launches(exercise: str, module: RawModule, q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray,
                      lse: np.ndarray, do: np.ndarray, dq: np.ndarray, dk: np.ndarray, dv: np.ndarray,
                      delta: np.ndarray, scale: float, causal: bool) -> list[Launch]:
    """The launches of a backward step, in order: Δ first, then the gradient kernel(s)."""
    c = kernel_constants(module, exercise)
    n_q, d = q.shape
    n_k = k.shape[0]
    name = STEPS[exercise].kernel_file.rsplit("/", 1)[1]
    need(d <= c["MAX_HEAD_DIM"], f"{name} keeps each thread's dK/dV (and dQ) columns in thread arrays sized for "
                                 f"D <= MAX_HEAD_DIM = {c['MAX_HEAD_DIM']}; D = {d} is too large.")
    threads, bm, bn = c["THREADS"], c["BLOCK_M"], c["BLOCK_N"]
    shape = dict(n_q=np.uint32(n_q), n_k=np.uint32(n_k), d=np.uint32(d), scale=np.float32(scale),
                 causal=np.uint32(bool(causal)))
    launches = [_make("backward_delta", (math.ceil(n_q / threads),), threads,
                      dict(o=o, dout=do, delta=delta, n_q=np.uint32(n_q), d=np.uint32(d)), {},
                      f"backward_delta of {name}")]
    common = dict(q=q, k=k, v=v, dout=do, lse=lse, delta=delta)
    kernels = STEPS[exercise].kernels[1:]
    for kernel in kernels:
        outputs = {"backward_dkdv_dq_atomic": dict(dq=dq, dk=dk, dv=dv), "backward_dkdv": dict(dk=dk, dv=dv),
                   "backward_dq": dict(dq=dq)}[kernel]
        blocks = math.ceil(n_q / bm) if kernel == "backward_dq" else math.ceil(n_k / bn)
        launches.append(_make(kernel, (blocks,), threads, common | outputs | shape, _backward_memory(c, d, kernel),
                              f"{kernel} of {name} at D = {d} (BLOCK_M = {bm}, BLOCK_N = {bn})"))
    return launches


def _backward(exercise: str, module: RawModule, q, k, v, o, lse, do, causal: bool, scale: float | None,
              device: str, gpu_launcher: GpuLauncher | None, launch: dict[str, Any]):
    qa, ka, va, oa, la, da = backward_arrays(q, k, v, o, lse, do)
    n_q, d = qa.shape
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    # What a kernel must write starts as NaN (see _forward); the atomic kernel only adds to dQ, which starts as 0.
    # With no query rows nothing is launched, and dK = dV = 0.
    unwritten = np.nan if n_q else 0.0
    dq = np.zeros_like(qa) if STEPS[exercise].variant == "atomic" else np.full_like(qa, np.nan)
    dk, dv = np.full_like(ka, unwritten), np.full_like(va, unwritten)
    delta = np.full(n_q, np.nan, dtype=np.float32)
    items = backward_launches(exercise, module, qa, ka, va, oa, la, da, dq, dk, dv, delta, scale, causal)
    if n_q:
        _run(module, items, device, gpu_launcher, launch)
    return (torch.from_numpy(dq).to(q.dtype), torch.from_numpy(dk).to(k.dtype), torch.from_numpy(dv).to(v.dtype))


def backward_atomic(module: RawModule, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                    lse: torch.Tensor, do: torch.Tensor, causal: bool = False, scale: float | None = None, *,
                    device: str = "cpu", gpu_launcher: GpuLauncher | None = None,
                    **launch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV) with 07_backward_atomic.metal: Δ, then one kernel for dK, dV and (by emulated float
    atomics) dQ. Takes the forward's O and natural-log LSE (float32, -inf for a row that sees no key)."""
    return _backward(_backward_step("atomic"), module, q, k, v, o, lse, do, causal, scale, device, gpu_launcher,
                     launch)


def backward_split(module: RawModule, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                   lse: torch.Tensor, do: torch.Tensor, causal: bool = False, scale: float | None = None, *,
                   device: str = "cpu", gpu_launcher: GpuLauncher | None = None,
                   **launch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV) with 07_backward_split.metal: Δ, a dK/dV kernel and a dQ kernel, no atomics."""
    return _backward(_backward_step("split"), module, q, k, v, o, lse, do, causal, scale, device, gpu_launcher,
                     launch)


_BACKWARD_OF_VARIANT = {"atomic": backward_atomic, "split": backward_split}
BACKWARD = {step.exercise: _BACKWARD_OF_VARIANT[step.variant] for step in STEPS.values() if not step.layout}


def forward_function(exercise: str, module: RawModule, tiles: Tiles | None = None, *, device: str = "cpu",
                     gpu_launcher: GpuLauncher | None = None, **launch: Any) -> Callable[..., Any]:
    """``fn(q, k, v, causal=False, scale=None) -> (o, lse)``: forward step ``exercise`` of ``module`` with these
    tiles, on ``device``, with these options of the CPU runtime (as ``course.tracks.cuda.attention_function``)."""
    forward = FORWARD[exercise]
    return lambda q, k, v, causal=False, scale=None: forward(module, q, k, v, causal, scale, device=device,
                                                             tiles=tiles, gpu_launcher=gpu_launcher, **launch)


def backward_function(exercise: str, module: RawModule, *, device: str = "cpu",
                      gpu_launcher: GpuLauncher | None = None, **launch: Any) -> Callable[..., Any]:
    """``fn(q, k, v, o, lse, do, causal=False, scale=None) -> (dq, dk, dv)``: backward step ``exercise`` of
    ``module`` on ``device``, with these options of the CPU runtime."""
    backward = BACKWARD[exercise]
    return lambda q, k, v, o, lse, do, causal=False, scale=None: backward(module, q, k, v, o, lse, do, causal, scale,
                                                                          device=device, gpu_launcher=gpu_launcher,
                                                                          **launch)
