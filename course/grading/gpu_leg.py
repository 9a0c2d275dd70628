"""A checked ``%%cuda`` kernel on a real GPU too: the line ``course.check`` adds under the grade there.

On a machine with an NVIDIA GPU (cupy or cuda-python, a device, and the course on its GPU tier),
``course.check`` of a ``%%cuda`` kernel first grades it on the CPU runtime (memcheck, racecheck, a
random schedule) exactly as everywhere. When that passes, :func:`gpu_note` compiles the same source
with NVRTC, runs it on the GPU on one case and compares its output with the CPU runtime's on the same
inputs (:func:`compare`, within the case's error budget), then times it beside PyTorch's SDPA on one
larger shape. That is one more line under the grade: the grade is the CPU runtime's, the line is
information (a GPU that disagrees does not cost points, and says so). Elsewhere :func:`gpu_note`
returns None and nothing is printed.

The comparison takes runners (``course.tracks.cuda_gpu``: :class:`GpuRunner` on a GPU, ``cpu_runner``
on the CPU runtime), so it runs anywhere with two CPU runners.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from course import tiers
from course.errors import CourseError
from course.grading.budget import attention_budget, plain_attention
from course.grading.recording import autograding
from course.inputs import Case
from course.reference import attention
from course.simt import RawModule, gpu
from course.tracks import cuda_gpu
from course.tracks.cuda import STEPS, Runner

__all__ = ["COMPARE_CASES", "Comparison", "compare", "gpu_leg_status", "gpu_note"]

# The case each step is compared on: small enough for the CPU runtime to run in a moment, a ragged last
# tile for every tile size, causal for step 06.
COMPARE_CASES: dict[str, Case] = {
    name: Case(100, 77, 64, dtype=torch.float16 if STEPS[name].half_inputs else torch.float32, seed=11,
               causal=STEPS[name].causal)
    for name in cuda_gpu.GPU_EXERCISES
}


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
    case = case or COMPARE_CASES[exercise]
    q, k, v = case.tensors()
    mine = cuda_gpu.run_step(exercise, reference, q, k, v, case.causal).double()
    moved = (t.to(other_device) for t in (q, k, v))
    theirs = cuda_gpu.run_step(exercise, other, *moved, causal=case.causal).cpu().double()
    oracle = attention(q, k, v, case.causal).o
    budget = attention_budget(oracle, plain_attention(q, k, v, case.causal), case.dtype)
    difference = float((theirs - mine).abs().max()) if theirs.shape == mine.shape else math.inf
    if math.isnan(difference):  # a NaN anywhere (an element never written) is no agreement
        difference = math.inf
    error = float((theirs - oracle).abs().max().nan_to_num(math.inf))
    return Comparison(exercise, case, difference, budget.allowed, budget.ratio(error))


def gpu_leg_status() -> tuple[bool, str]:
    """(True, the launcher and GPU) when a checked CUDA kernel also runs on a GPU here; else (False, why not)."""
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
    if exercise not in cuda_gpu.GPU_EXERCISES or not isinstance(module, RawModule) or module.language != "cuda":
        return None
    ok, why = gpu_leg_status()
    if not ok:
        return None if autograding() or not cuda_gpu.has_nvidia_gpu() else f"GPU run skipped: {why}"
    try:
        runner = cuda_gpu.GpuRunner(module)
        result = compare(exercise, cuda_gpu.cpu_runner(module), runner, other_device="cuda")
        device = torch.cuda.get_device_name(0)
        if not result.agrees:
            return (f"✗ on the GPU ({device}) your kernel's O differs from the CPU runtime's on "
                    f"{result.case.describe()}: max |GPU - CPU| = {result.max_difference:.3g} (budget "
                    f"{result.allowed:.3g}), {result.worst_ratio:.2f}× of budget from the float64 oracle. The grade is "
                    f"the CPU runtime's; a kernel that differs on a GPU has a bug the CPU runtime did not meet "
                    f"(a race, an uninitialised read, an order assumed).")
        timing = cuda_gpu.time_step(exercise, runner)
    except (CourseError, gpu.GpuUnavailable) as e:
        return f"✗ on the GPU: {' '.join(str(e).split())[:600]} (the grade is the CPU runtime's)"
    return (f"✓ also on the GPU ({device}): O matches the CPU runtime's on {result.case.describe()} "
            f"(max |GPU - CPU| = {result.max_difference:.2g}); {_shape_text(timing.shape)}: "
            f"{timing.kernel_ms:.3f} ms, SDPA {timing.sdpa_ms:.3f} ms ({timing.kernel_ms / timing.sdpa_ms:.1f}× SDPA's time).")
