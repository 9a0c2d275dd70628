"""Checks more than one lesson runs: a kernel with one program per query row (lessons 01 and 02), a kernel of
the CUDA C or Metal track on the CPU SIMT runtime (lessons 01-07), the tiled Triton forward (lessons 03-05), and
the options every Triton kernel check runs with (the best tier there is, race watching on the interpreter).

What only one lesson checks lives in that lesson's module, ``course/lessons/lessonNN.py``.
"""
from __future__ import annotations

from typing import Iterable

import torch

from course import tiers
from course.grading.comparison import Report, learner_call
from course.grading.compare_attention import check_attention
from course.grading.recording import autograding
from course.inputs import Case
from course.tracks import table

__all__ = ["F16", "check_explicit_scale", "forward_cases", "kernel_options", "learner_call", "naive_simt", "row_kernel",
           "row_kernel_cases", "tiled", "track_step"]


def check_explicit_scale(exercise: str, fn, case: Case, scale: float, **options) -> Report:
    """The follow-up of an attention check: ``case`` once more with ``scale=`` passed to ``fn``, a scale that is not
    1/sqrt(D), so that a function that ignores the scale it is given, or always uses its own, fails here.
    ``options`` go to ``check_attention`` (tier, device, with_lse ...)."""
    return check_attention(exercise, fn, [case], scale=scale, pass_scale=True, **options)


def row_kernel_cases() -> list[Case]:
    # Kept small: the interpreter runs the programs (one per query row) one after the other, a block
    # of 32 keys per step. 33 and 40 keys cross a block boundary with a ragged last block.
    return [Case(1, 1, 16), Case(17, 17, 16, kind="peaky", seed=1), Case(17, 17, 64, seed=2),
            Case(33, 33, 64, kind="peaky", seed=3), Case(5, 40, 32, seed=4), Case(40, 6, 16, seed=6),
            Case(24, 24, 32, dtype=torch.float16, seed=21)]


def row_kernel(exercise: str, more: tuple[Case, ...] = ()):
    """A Triton kernel with one program per query row (lesson 01's two passes, lesson 02's one sweep)."""
    def run(fn, cases: Iterable[Case] | None = None) -> Report:
        cases = list(cases) if cases is not None else row_kernel_cases() + list(more)
        where = kernel_options()
        report = check_attention(exercise, fn, cases, **where)
        check_explicit_scale(exercise, fn, Case(9, 12, 16, seed=5), 0.3, **where)
        return report
    return run


def naive_simt(exercise: str):
    """A one-thread-per-row kernel in CUDA C or Metal (lesson 01, Metal's lesson 02), run on the CPU SIMT
    runtime with memcheck, racecheck and a random schedule (``module`` is the RawModule a ``%%cuda`` /
    ``%%metal`` cell made)."""
    def run(module, cases: Iterable[Case] | None = None) -> Report:
        from course.grading import kernel_steps  # here, not on top: +6 ms to `import course` (the launchers)
        from course.tracks import cuda  # here, not on top: +6 ms to `import course`
        fn = cuda.attention_function(module, exercise, **cuda.GRADING_LAUNCH)
        if cases is None:
            cases = [Case(1, 1, 16), Case(17, 17, 16, kind="peaky", seed=1), Case(65, 65, 64, seed=2),
                     Case(33, 33, 128, kind="peaky", seed=3), Case(5, 40, 32, seed=4), Case(70, 6, 16, seed=6),
                     Case(24, 24, 32, kind="constant_rows", seed=7)]
        tier = kernel_steps.CHECKED_TIER
        report = check_attention(exercise, fn, cases, tier=tier)
        check_explicit_scale(exercise, fn, Case(9, 12, 16, seed=5), 0.3, tier=tier)
        return report
    return run


def track_step(exercise: str):
    """A step of the CUDA C or Metal track on the CPU SIMT runtime (``kernel_steps.check_step``): its own
    cases, or the given ones under memcheck + racecheck and a random schedule."""
    def run(module, cases: Iterable[Case] | None = None) -> Report:
        from course.grading import techniques  # here, not on top: +20 ms to `import course`
        from course.grading import kernel_steps  # here, not on top: +6 ms to `import course` (the launchers)
        techniques.before_values(exercise, module)  # the tiles a causal step skips, as its row declares them
        if cases is None:
            report = kernel_steps.check_step(exercise, module)
        else:
            report = kernel_steps.check_step(exercise, module, checked_cases=list(cases), plain_cases=())
        techniques.after_values(exercise, module)  # the step's technique, measured as its row declares it
        return report
    return run


# -- the Triton track (lessons 01-08) ------------------------------------------------------------
# Kernels run on the best tier there is; on Triton's interpreter every launch is also watched for
# races between programs (the interpreter runs programs one by one, so a race would go unseen).
# Case sizes stay small because the interpreter executes each program in Python.

F16 = torch.float16


def kernel_options() -> dict:
    return dict(device=tiers.device(), tier=tiers.active_tier(), race=tiers.triton_interpreted())


def forward_cases(dtype_mix: tuple[torch.dtype, torch.dtype] = (torch.float32, F16)) -> list[Case]:
    main, other = dtype_mix
    return [Case(1, 1, 16, dtype=main), Case(17, 17, 32, kind="peaky", dtype=main, seed=1),
            Case(129, 129, 64, dtype=main, seed=2), Case(17, 129, 16, dtype=main, seed=3),
            Case(129, 17, 128, dtype=main, seed=4), Case(70, 70, 16, kind="constant_rows", dtype=main, seed=5),
            Case(33, 65, 64, kind="peaky", dtype=other, seed=6)]


def tiled(exercise: str, fn, cases: Iterable[Case] | None, dtype_mix=(torch.float32, F16)) -> Report:
    cases = list(cases) if cases is not None else forward_cases(dtype_mix)
    report = check_attention(exercise, fn, cases, with_lse=True, **kernel_options())
    check_explicit_scale(exercise, fn, Case(9, 40, 32, seed=9), 0.3, with_lse=True, **kernel_options())
    from course.grading import techniques  # here, not on top: +20 ms to `import course`
    # The lesson's technique, measured, as the step's row declares it (lesson 05: both products on tl.dot, 16-bit
    # operands; lesson 04: the compiled loop is pipelined). A probe the row keeps from the grader's run of the
    # notebook (the re-check compiles and measures the same file: once per submission, not twice) is skipped there.
    row = table.exercise(exercise)
    if row.technique_probe and (row.probe_under_grader or not autograding()):
        techniques.triton_probe(row.technique_probe)(exercise, fn)
    return report

