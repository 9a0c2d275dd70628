"""A CUDA C kernel on a real GPU: the runners that launch the course's CUDA steps there, and their timing.

On a machine with an NVIDIA GPU (cupy or cuda-python, a device), :class:`GpuRunner` compiles a kernel
module's text with NVRTC and launches it; :func:`run_step` runs a forward step through any *runner*
(``runner(kernel_name, grid, block, args, shared_mem)``, as ``course.tracks.cuda.forward`` takes them),
:func:`cpu_runner` being the CPU runtime's; :func:`time_step` times a step beside PyTorch's SDPA.
:class:`GpuModule` puts a kernel module on the GPU where code wants a ``RawModule`` (the backward
launchers). The line ``course.check`` prints under a passing ``%%cuda`` kernel on such a machine (the
same kernel compared with the CPU runtime's run, then timed) is ``course.grading.gpu_leg``'s.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from course.simt import RawModule, gpu
from course.tracks import table
from course.tracks.cuda import STEPS, THREADS_PER_BLOCK, Runner, forward

__all__ = ["GPU_EXERCISES", "GpuRunner", "GpuModule", "cpu_runner", "run_step", "Timing", "time_step",
           "has_nvidia_gpu", "TIMED_SHAPES"]

# The steps a GPU run covers: every forward step of the CUDA track (lesson 01's one-thread-per-row kernel too).
GPU_EXERCISES = [name for name, step in STEPS.items() if step.language == "cuda"]

# (heads, N, D) the GPU run is timed on, beside SDPA on the same shape (lesson 01's kernel takes one head).
TIMED_SHAPES = {name: ((1, 2048, 64) if STEPS[name].layout == "naive" else (16, 2048, 64)) for name in GPU_EXERCISES}


def _source(module: RawModule) -> tuple[str, str]:
    """The module's text as NVRTC gets it (lines numbered as the learner's cell numbers them) and its name."""
    return "\n" * (module.first_line - 1) + module.code, module.display_path


class GpuRunner:
    """A runner that launches the kernels of ``module`` (or of the file at ``path``) on the GPU with NVRTC;
    ``seconds`` keeps each launch's time on the device."""

    def __init__(self, module: RawModule | None = None, *, path: str | Path | None = None):
        if module is not None:
            self.source, self.path = _source(module)
        else:
            self.source, self.path = None, str(path)
        self.seconds: list[float] = []

    def __call__(self, name: str, grid, block, args, shared_mem: int = 0) -> None:
        result = gpu.launch_cuda(self.source, self.path, name, grid, block, args, shared_mem=shared_mem)
        self.seconds.append(result.seconds)


def cpu_runner(module: RawModule, **launch: Any) -> Runner:
    """A runner on the CPU runtime (``launch``: its options, e.g. ``check="memcheck"``)."""
    def run(name: str, grid, block, args, shared_mem: int = 0) -> None:
        module.get_function(name)(grid, block, args, shared_mem=shared_mem, **launch)
    return run


class GpuModule(RawModule):
    """``module`` with its kernels launched on the GPU: ``get_function(name)(grid, block, args, shared_mem)``
    calls NVRTC's build of the same text. CPU-runtime options (``check=``, ``schedule=`` ...) are ignored."""

    def __init__(self, module: RawModule):
        super().__init__(module.code, language="cuda", name=module.display_path, first_line=module.first_line,
                         compile_now=None)
        self.runner = GpuRunner(module)

    def get_function(self, name: str):  # type: ignore[override]
        super().get_function(name)  # the same message for a name the module does not define

        def launch(grid, block, args, shared_mem: int = 0, **_cpu_only: Any):
            self.runner(name, grid, block, args, shared_mem)
        return launch


def _naive(runner: Runner, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Lesson 01's launch (course.tracks.cuda.naive_attention) through ``runner``: one head, float32, 64 threads."""
    qa, ka, va = (t.detach().float().contiguous() for t in (q, k, v))
    n_q, d = qa.shape
    o = torch.full_like(qa, float("nan"))
    blocks = (n_q + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
    runner(STEPS[table.ladder_baseline("cuda").id].kernel, (blocks,), (THREADS_PER_BLOCK,),
           (qa, ka, va, o, n_q, ka.shape[0], d, 1.0 / math.sqrt(d)), 0)
    return o.to(q.dtype)


def run_step(exercise: str, runner: Runner, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             causal: bool = False) -> torch.Tensor:
    """O of step ``exercise`` on (N, D) or (H, N, D) inputs through ``runner`` (LSE is left out: O is compared)."""
    if STEPS[exercise].layout == "naive":
        return _naive(runner, q, k, v)
    out = forward(exercise, None, q, k, v, None, causal, runner=runner)
    return out[0] if isinstance(out, tuple) else out


@dataclass
class Timing:
    shape: tuple[int, int, int, bool]   # heads, N, D, causal
    kernel_ms: float
    sdpa_ms: float


def _median_ms(once: Callable[[], float], reps: int) -> float:
    once()  # compiles, loads the module, warms the caches
    return statistics.median(once() for _ in range(reps)) * 1e3


def time_step(exercise: str, runner: GpuRunner, shape: tuple[int, int, int] | None = None, reps: int = 5) -> Timing:
    """Median GPU time of step ``exercise`` through ``runner`` and of SDPA on the same float16 (H, N, N, D)
    inputs (``runner.seconds``: launch to completion of the kernel; SDPA between two synchronizes)."""
    heads, n, d = shape or TIMED_SHAPES[exercise]
    causal = STEPS[exercise].causal
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(heads, n, d, device="cuda", dtype=torch.float16, generator=gen) for _ in range(3))
    if not STEPS[exercise].half_inputs:
        q, k, v = (t.float() for t in (q, k, v))  # copies made once, outside the timed launches
    if STEPS[exercise].layout == "naive":
        q, k, v = q[0], k[0], v[0]

    def kernel() -> float:
        runner.seconds.clear()
        run_step(exercise, runner, q, k, v, causal)
        return sum(runner.seconds)

    sdpa = torch.nn.functional.scaled_dot_product_attention
    q4, k4, v4 = (t.reshape(1, -1, n, d).half() for t in (q, k, v))

    def reference() -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        sdpa(q4, k4, v4, is_causal=causal)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    return Timing((heads, n, d, causal), _median_ms(kernel, reps), _median_ms(reference, reps))


def has_nvidia_gpu() -> bool:
    """Whether the NVIDIA driver reports a GPU, asked without loading CUDA (the driver's /proc entries)."""
    gpus = Path("/proc/driver/nvidia/gpus")
    try:
        return gpus.is_dir() and any(gpus.iterdir())
    except OSError:
        return False
