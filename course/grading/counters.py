"""Memory-traffic counters a learner can trust without a GPU: ``course.grading.counters(kernel_or_function, *inputs)``.

    c = course.grading.counters(tiled_cuda, q, k, v)          # a %%cuda / %%metal module: the step's own launch
    c = course.grading.counters(kernel, grid, block, args)    # one course.simt.RawKernel launch
    c = course.grading.counters(tiled_attention, q, k, v)     # a Python function launching Triton or SIMT kernels
    c                                                 # a table in the notebook; print(c) for plain text
    c.metrics["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"], c.by_tensor["k"]["load_bytes"], c.rows
    track, c = course.counters.first_finished(q, k, v, triton=f, cuda=m, metal=m2)   # the first finished track

CUDA C and Metal kernels run on the CPU runtime in counters mode (``check="counters"``), costed by the course's
model of the memory system (:mod:`course.models.traffic`), in Nsight Compute's metric names where it has one.
Triton kernels run on the interpreter, which has no warps: for them the counters are the bytes each program
loads and stores, per tensor (:mod:`course.grading.counters_triton`). The result is a
:class:`~course.grading.counters_table.Counters`. docs/counters.md has the model.

The module itself is callable (``course.counters(...)`` in a notebook), and ``course.counters.Counters`` and
``course.counters.first_finished`` stay reachable on it.
"""
from __future__ import annotations

import math
import os
import sys
from typing import Any, Callable

from course.errors import CourseError
from course.grading.counters_table import Counters
from course.grading.counters_triton import triton_counters
from course.grading.comparison import untouched_stub
from course.grading.racecheck import interpreter_checks
from course.paths import REPO
from course.simt import RawKernel, RawModule
from course.simt.kernel import collect_counters
from course.tracks import table

__all__ = ["counters", "first_finished", "Counters"]


def _module_function(module, tiles=None, exercise: str | None = None) -> Callable[..., Any]:
    """The attention function of a %%cuda / %%metal module's step (the course's own launch)."""
    from course.tracks import cuda, metal  # here, not on top: +8 ms to `import course`
    if module.language == "cuda":
        return cuda.attention_function(module, exercise, tiles)
    if exercise is None:
        found = [row.id for row in table.exercises(track="metal") if row.entry[0] in module.kernels and not row.backward]
        if len(found) != 1:
            raise CourseError("cannot tell which Metal step these kernels are for; pass exercise=\"03.tiled_metal\" "
                              "or the like, or measure a function that launches them.")
        exercise = found[0]
    if exercise in cuda.STEPS:  # one thread per row: the CUDA launcher serves lessons 01 and 02 of Metal
        return cuda.attention_function(module, exercise, tiles)
    forward = metal.FORWARD[exercise]
    return lambda q, k, v, causal=False: forward(module, q, k, v, causal, tiles=tiles)


def counters(target: Any, *inputs: Any, tiles=None, exercise: str | None = None, **options: Any) -> Counters:
    """Run ``target`` once on ``inputs`` and measure its memory traffic.

    ``target`` is a ``course.simt.RawKernel`` (``inputs`` are then ``grid, block, args``; ``options`` the
    launch's, e.g. ``shared_mem=``), a ``%%cuda`` / ``%%metal`` module (launched as its lesson step, on
    ``q, k, v``, with ``tiles=`` if given), or any Python function that launches CUDA C, Metal or Triton
    kernels. CUDA C and Metal kernels run on the CPU runtime in counters mode; Triton kernels on the
    interpreter. Returns a :class:`Counters` (a table in a notebook).
    """
    _refuse_unfinished(target)
    if isinstance(target, RawModule):
        target = _module_function(target, tiles, exercise)
    elif tiles is not None or exercise is not None:
        raise CourseError("tiles= and exercise= choose the launch of a %%cuda / %%metal module; pass them to your "
                          "own function instead.")
    if type(target).__name__ in ("JITFunction", "Autotuner", "Heuristics"):
        raise CourseError("a @triton.jit kernel is launched as kernel[grid](...): pass the Python function that "
                          "launches it (and its inputs) instead.")
    if not callable(target):
        raise CourseError(f"course.grading.counters measures a kernel, a %%cuda / %%metal module or a function; got "
                          f"{type(target).__name__}.")
    triton_launches: list = []
    order: list = []
    with collect_counters() as simt_launches:
        with interpreter_checks(launches=triton_launches):
            target(*inputs, **options)
    order = list(simt_launches) + [triton_counters(launch) for launch in triton_launches]
    if not order:
        what = "kernel" if isinstance(target, RawKernel) else getattr(target, "__name__", "the function")
        raise CourseError(f"{what} launched no kernel that could be measured: CUDA C and Metal kernels are measured "
                          "on the CPU runtime, Triton kernels on its interpreter (on a machine without a GPU).")
    return Counters(order)


def _stub_exercise(module) -> str | None:
    """The exercise whose kernel ``module`` still is exactly as handed out (every solution region empty)."""
    for row in table.exercises(track=module.language):
        if row.entry[0] in module.kernels and untouched_stub(row.id, module.code):
            return row.id
    return None


def _refuse_unfinished(target: Any) -> None:
    """A sentence instead of a measurement of nothing: a %%cuda / %%metal cell that failed to compile, or
    that still holds the kernel as handed out (it would run, and load no K or V at all)."""
    from course.grading.answers import NotFinished  # here, not on top: +1.3 ms to `import course`
    from course.simt.magic import CompileFailed  # here, not on top: +0.5 ms to `import course`
    if isinstance(target, CompileFailed):
        raise NotFinished(f"your %%{target.language} {target.name} cell did not compile, so its kernel is not finished "
                          f"yet: fix the error that cell shows, run it, then run this cell again.")
    if not isinstance(target, RawModule) or _stub_exercise(target) is None:
        return
    path = target.display_path
    if os.path.isabs(path):  # a kernel file: in a copy of the course without its solutions (the grader's)
        shown = os.path.relpath(path, REPO) if path.startswith(str(REPO) + os.sep) else path
        raise NotFinished(f"the kernel in {shown} is not finished yet: its solution regions are empty in this copy "
                          f"of the course, so there is nothing to measure.")
    cell = os.path.splitext(os.path.basename(path))[0]
    raise NotFinished(f"your %%{target.language} {cell} cell is not finished yet (nothing is written where it says "
                      f"`// YOUR CODE HERE`): complete it, run it, then run this cell again.")


def first_finished(*inputs: Any, **tracks: Any) -> tuple[str, Counters]:
    """Measure the first of ``tracks`` (track name -> a %%cuda / %%metal module or a function launching
    Triton kernels) that is finished: ``track, c = first_finished(q, k, v, triton=f, cuda=m, metal=m2)``.

    A track still holding its stub (or whose cell failed) is skipped; when none is finished, one sentence
    (course.grading.answers.NotFinished) says so. Any other error of a kernel is raised as it is."""
    from course.grading.answers import NotFinished, unfinished_sentence  # here, not on top: +1.3 ms to `import course`
    for track, target in tracks.items():
        try:
            return track, counters(target, *inputs)
        except Exception as error:  # noqa: BLE001 - only an unfinished exercise is passed over
            if unfinished_sentence(error) is None:
                raise
    named = [table.TRACK_NAMES.get(t, t) for t in tracks]
    names = " or ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named)
    raise NotFinished(f"This cell measures your kernel, which is not finished yet in any track ({names}): complete "
                      f"one, run its cell, then run this cell again.")


class _CallableModule(type(math)):
    """``course.grading.counters(...)`` measures; ``course.grading.counters.Counters`` and the rest stay reachable."""

    def __call__(self, target: Any, *inputs: Any, **options: Any) -> Counters:
        return counters(target, *inputs, **options)


sys.modules[__name__].__class__ = _CallableModule
