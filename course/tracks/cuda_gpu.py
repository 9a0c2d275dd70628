"""A CUDA C kernel on a real GPU too: the GPU runners, and the line ``course.check`` adds there.

On a machine with an NVIDIA GPU (cupy or cuda-python, a device, and the course on its GPU tier),
``course.check`` of a ``%%cuda`` kernel first grades it on the CPU runtime (memcheck, racecheck, a
random schedule) exactly as everywhere. When that passes, :func:`gpu_note` compiles the same source
with NVRTC, runs it on the GPU on one case and compares its output with the CPU runtime's on the same
inputs, then times it beside PyTorch's SDPA on one larger shape. That is one more line under the
grade: the grade is the CPU runtime's, the line is information (a GPU that disagrees does not cost
points, and says so). Elsewhere :func:`gpu_note` returns None and nothing is printed.

The pieces take *runners* (``runner(kernel_name, grid, block, args, shared_mem)``, as
``course.tracks.cuda.forward`` takes them), so the comparison runs anywhere with two CPU runners, and
on a GPU with :class:`GpuRunner` against :func:`cpu_runner`. :class:`GpuModule` puts a kernel module on
the GPU where code wants a ``RawModule`` (the backward launchers).
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from course.inputs import Case
from course.simt import RawModule
from course.tracks.cuda import STEPS, THREADS_PER_BLOCK, Runner, forward

__all__ = ["GPU_EXERCISES", "GpuRunner", "GpuModule", "cpu_runner", "run_step", "Comparison", "compare",
           "Timing", "time_step", "gpu_leg_status", "gpu_note", "COMPARE_CASES", "TIMED_SHAPES"]

# The steps a GPU run covers: every forward step of the CUDA track (lesson 01's one-thread-per-row kernel too).
GPU_EXERCISES = [name for name, step in STEPS.items() if step.language == "cuda"]

# The case each step is compared on: small enough for the CPU runtime to run in a moment, a ragged last
# tile for every tile size, causal for step 06.
COMPARE_CASES: dict[str, Case] = {
    name: Case(100, 77, 64, dtype=torch.float16 if STEPS[name].half_inputs else torch.float32, seed=11,
               causal=STEPS[name].causal)
    for name in GPU_EXERCISES
}
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
        from course.simt import gpu
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
    runner(STEPS["01.naive_cuda"].kernel, (blocks,), (THREADS_PER_BLOCK,),
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
class Comparison:
    """The same step through two runners on the same inputs."""

    exercise: str
    case: Case
    max_difference: float     # max |other - reference| over O
    allowed: float            # the error budget of the case (course.grading.budget, as the grade uses it)
    worst_ratio: float        # the other run's error against the float64 oracle, as a fraction of the budget

    @property
    def agrees(self) -> bool:
        return self.max_difference <= self.allowed and self.worst_ratio <= 1.0


def compare(exercise: str, reference: Runner, other: Runner, case: Case | None = None,
            other_device: str = "cpu") -> Comparison:
    """Run step ``exercise`` through ``reference`` and through ``other`` on one case and compare the two O.

    ``other_device``: where ``other`` wants its inputs ("cuda" for a GpuRunner on torch CUDA tensors).
    """
    from course.grading.budget import attention_budget, plain_attention
    from course.reference import attention

    case = case or COMPARE_CASES[exercise]
    q, k, v = case.tensors()
    mine = run_step(exercise, reference, q, k, v, case.causal).double()
    theirs = run_step(exercise, other, *(t.to(other_device) for t in (q, k, v)), causal=case.causal).cpu().double()
    oracle = attention(q, k, v, case.causal).o
    budget = attention_budget(oracle, plain_attention(q, k, v, case.causal), case.dtype)
    difference = float((theirs - mine).abs().max()) if theirs.shape == mine.shape else math.inf
    if math.isnan(difference):  # a NaN anywhere (an element never written) is no agreement
        difference = math.inf
    error = float((theirs - oracle).abs().max().nan_to_num(math.inf))
    return Comparison(exercise, case, difference, budget.allowed, budget.ratio(error))


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


def _has_nvidia_gpu() -> bool:
    """Whether the NVIDIA driver reports a GPU, asked without loading CUDA (the driver's /proc entries)."""
    gpus = Path("/proc/driver/nvidia/gpus")
    try:
        return gpus.is_dir() and any(gpus.iterdir())
    except OSError:
        return False


def gpu_leg_status() -> tuple[bool, str]:
    """(True, the launcher and GPU) when a checked CUDA kernel also runs on a GPU here; else (False, why not)."""
    from course import tiers
    from course.grading.recording import autograding
    from course.simt import gpu

    if autograding():
        return False, "the grader runs kernels on the CPU runtime only."
    ok, why = gpu.cuda_available()
    if not ok:
        return False, why
    if tiers.device() != "cuda":
        return False, "the course runs on its CPU tier in this process (COURSE_TIER=cpu, or no GPU for PyTorch)."
    return True, why


def _shape_text(shape: tuple[int, int, int, bool]) -> str:
    heads, n, d, causal = shape
    return f"H={heads}, N={n}, D={d}{', causal' if causal else ''}"


def gpu_note(exercise: str, module: Any) -> str | None:
    """The line ``course.check`` prints under a passing CUDA kernel on a GPU machine, or None.

    None where there is no NVIDIA GPU, under the grader, and for what is not a forward step of the CUDA
    track; a sentence saying why the GPU run was skipped where a GPU is there but cannot be used.
    """
    if exercise not in GPU_EXERCISES or not isinstance(module, RawModule) or module.language != "cuda":
        return None
    ok, why = gpu_leg_status()
    if not ok:
        from course.grading.recording import autograding
        return None if autograding() or not _has_nvidia_gpu() else f"GPU run skipped: {why}"
    from course.errors import CourseError
    from course.simt import gpu

    try:
        runner = GpuRunner(module)
        result = compare(exercise, cpu_runner(module), runner, other_device="cuda")
        device = torch.cuda.get_device_name(0)
        if not result.agrees:
            return (f"✗ on the GPU ({device}) your kernel's O differs from the CPU runtime's on "
                    f"{result.case.describe()}: max |GPU - CPU| = {result.max_difference:.3g} (budget "
                    f"{result.allowed:.3g}), {result.worst_ratio:.2f}× of budget from the float64 oracle. The grade is "
                    f"the CPU runtime's; a kernel that differs on a GPU has a bug the CPU runtime did not meet "
                    f"(a race, an uninitialised read, an order assumed).")
        timing = time_step(exercise, runner)
    except (CourseError, gpu.GpuUnavailable) as e:
        return f"✗ on the GPU: {' '.join(str(e).split())[:600]} (the grade is the CPU runtime's)"
    return (f"✓ also on the GPU ({device}): O matches the CPU runtime's on {result.case.describe()} "
            f"(max |GPU - CPU| = {result.max_difference:.2g}); {_shape_text(timing.shape)}: "
            f"{timing.kernel_ms:.3f} ms, SDPA {timing.sdpa_ms:.3f} ms ({timing.kernel_ms / timing.sdpa_ms:.1f}× SDPA's time).")
