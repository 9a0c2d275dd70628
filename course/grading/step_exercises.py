"""A lesson step's kernel exercises and hint ladders, built from the step's rows of the kernel table.

A kernel exercise's id (``01.naive_cuda``) is written once, on its row (course/tracks/table.py, or the lesson's own
``KERNEL_ROWS``); the lesson module gives what is its own (a title, the check of each track, the hints) and
:func:`step_exercises` and :func:`step_ladders` make one entry per row.
"""
from __future__ import annotations

from typing import Any, Callable

from course.grading.exercise import Exercise, Ladder
from course.tracks import table

__all__ = ["step_exercises", "step_ladders"]


def _step_rows(lesson: str, step: str, variant: str) -> list:
    rows = [row for row in table.exercises(lesson=lesson, step=step) if row.variant == variant]
    if not rows:
        raise ValueError(f"lesson {lesson} declares no kernel row of the step {step!r}"
                         + (f" (variant {variant!r})" if variant else "") + " (course/tracks/table.py or its KERNEL_ROWS)")
    return rows


def step_exercises(lesson: str, step: str, title: str | dict[str, str],
                   checks: dict[str, Callable[[str], Callable[..., Any]]], variant: str = "") -> tuple[Exercise, ...]:
    """The kernel exercises of one lesson step, one per track its rows declare: a row's id is typed once, on the row.

    ``title`` is the step's title (each track's reads "<title> in <track>") or a title per track; ``checks`` maps each
    track to a function of the exercise id that returns its check (``row_kernel``, ``naive_simt``, ``track_step``)."""
    exercises = []
    for row in _step_rows(lesson, step, variant):
        if row.track not in checks:
            raise ValueError(f"{row.id}: the lesson gives no check for its {table.TRACK_NAMES[row.track]} row")
        named = title[row.track] if isinstance(title, dict) else f"{title} in {table.TRACK_NAMES[row.track]}"
        exercises.append(Exercise(row.id, named, checks[row.track](row.id), isolated=True,
                                  takes="function" if row.track == "triton" else "kernel module"))
    return tuple(exercises)


def step_ladders(lesson: str, step: str, rungs: tuple[str, ...], last: dict[str, str | tuple[str, ...]] | None = None,
                 variant: str = "", functions: dict[str, tuple[str, ...]] | None = None) -> tuple[Ladder, ...]:
    """The hint ladders of one lesson step's kernel exercises: ``rungs`` shared by every track, then each track's own
    last rungs (``last``, by track); ``functions``, by track, names the functions whose solution regions ``reveal``
    shows where that is not every region of the file (:class:`Ladder`)."""
    ladders = []
    for row in _step_rows(lesson, step, variant):
        own = (last or {}).get(row.track, ())
        ladders.append(Ladder(row.id, (*rungs, *((own,) if isinstance(own, str) else own)),
                              functions=(functions or {}).get(row.track, ())))
    return tuple(ladders)


