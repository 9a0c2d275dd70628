"""What a lesson module declares: its graded exercises (:class:`Exercise`) and their hint ladders (:class:`Ladder`).

Each ``course/lessons/lessonNN.py`` holds a tuple ``EXERCISES`` of the one and a tuple ``LADDERS`` of the other;
``course.exercises`` (``check``) and ``course.hint_ladder`` (``hint``, ``reveal``) assemble them from every lesson
module they find. The types live here, below both, so that a lesson module never imports the API built on it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from course.grading.engines import Report

__all__ = ["Exercise", "Ladder", "ladder", "TILED_RUNGS"]


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    run: Callable[..., Report]
    isolated: bool = False
    """Run in a child process: for learner kernels, which can crash the process that runs them."""
    takes: str = "function"
    """What the learner hands in: a Python function, or the kernel module a %%cuda / %%metal cell made."""
    probe: str | None = None
    """The course probe (:data:`course.lessons.capstone.PROBES`) the checks call around the learner's function, when what
    they need is more than its return value (the capstone's gradients and training run). Where the grade is
    decided it runs inside the answer process, around the function the handed-in cell defines."""


@dataclass(frozen=True)
class Ladder:
    exercise: str
    rungs: tuple[str, ...]
    cell: str = ""
    """For a Python exercise: ``<lesson folder>/<grade_id>`` of its solution cell in ``solutions/``."""
    functions: tuple[str, ...] = ()
    """For a kernel file that holds several exercises: the functions whose solution regions ``reveal`` shows
    (lesson 07's split backward is ``dq_kernel``, not the atomic exercise's regions beside it)."""


def ladder(exercise: str, *rungs: str, cell: str = "", functions: tuple[str, ...] = ()) -> Ladder:
    return Ladder(exercise, rungs, cell, functions)


# The first rungs of every tiled forward: lesson 03's kernels climb them, lesson 04's pipelined one starts from them.
TILED_RUNGS = (
    "The Q tile stays on chip; K and V come through in tiles. Which three things per query row survive from one "
    "K/V tile to the next?",
    "m, l and the accumulator, exactly as in lesson 02; a tile of keys is one online step for every row of the Q "
    "tile at once.",
)
