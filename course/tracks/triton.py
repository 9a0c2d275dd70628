"""The Triton track: the course's own answer to each Triton exercise, loaded from its kernel file.

Which file and function answer which exercise is in :mod:`course.tracks.table`; this module turns a
row of it into the callable the exercise grades.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from course.kernels import load_triton_module
from course.tracks.table import KernelExercise, exercise, exercises

__all__ = ["STEPS", "step", "solution"]

STEPS: list[KernelExercise] = exercises(track="triton")


def step(exercise_id: str) -> KernelExercise:
    row = exercise(exercise_id)
    if row.track != "triton":
        raise KeyError(exercise_id)
    return row


def solution(row: KernelExercise, kernel_file: str | None = None) -> Callable[..., Any]:
    """The course's own answer to ``row`` (or the same function from another copy of the file)."""
    fn = getattr(load_triton_module(kernel_file or row.kernel_file), row.entry[0])
    return functools.partial(fn, **row.options) if row.options else fn
