"""What a lesson module declares: its graded exercises (:class:`Exercise`) and their hint ladders (:class:`Ladder`).

Each ``course/lessons/lessonNN.py`` holds a tuple ``EXERCISES`` of the one and a tuple ``LADDERS`` of the other;
``course.lessons.load`` reads them from every lesson module, and ``course.exercises`` (``check``) and
``course.hint_ladder`` (``hint``, ``reveal``) are built on them. The types live here, below both, so that a lesson module never imports the API built on it.

A lesson with numeric exercises also declares, per exercise, the arguments its hidden tests draw (a dict ``DRAWS`` of
:data:`Draw`, helped by :func:`draw_size` and :data:`HEAD_DIMS`) and which course functions its answer may call (a
dict ``MODEL_POLICY`` of :class:`ModelPolicy`). What the grader runs for a lesson beyond its checks is declared the
same way (a function ``probes``, a :data:`ProbeSource`; a dict ``CELL_BUILDERS`` of :data:`CellBuilder`).
``course.lessons.load`` reads all of it; the re-check and the answer process, which sit below the lessons, are handed
what they use by their entry points (course.__main__), never by a table kept here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from course.grading.comparison import Report

__all__ = ["Exercise", "Ladder", "ladder", "TILED_RUNGS", "ModelPolicy", "HEAD_DIMS", "draw_size", "Draw", "ProbeSource",
           "CellBuilder", "STOP_AT_FIRST_PASS"]


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
    """The course probe (by name, :func:`probes`) the checks call around the learner's function, when what
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


# -- numeric exercises: arguments drawn when the grader checks -----------------------------------
# A lookup table of the visible arguments passes a visible check and nothing else: a hidden test adds
# ``drawn=N``, N argument sets drawn at random (os.urandom) within the lesson's valid range (course.exercises).

HEAD_DIMS = (16, 32, 48, 64, 80, 96, 128)
"""The head dims a lesson uses."""

Draw = Callable[[Any], dict | tuple]
"""One argument set of a numeric exercise drawn from a ``random.Random``, in the form its check takes (a lesson
module's ``DRAWS``, by exercise id). Every numeric exercise has one: a visible check that asks every question there is
is exactly what a pasted table of its answers passes."""


def draw_size(rng, low: int = 1, high: int = 8192) -> int:
    """A length, mostly not a multiple of any tile (1, 17, 129, ... as often as 128)."""
    return rng.choice([rng.randint(low, 64), rng.randint(low, high)])


# -- the course's own models as answers ---------------------------------------------------------------
# Some numeric exercises ask for exactly what a course module computes (course.models.roofline, course.models.causal, ...).
# Each declares which of those functions its answer may call (where the lesson's point is to use them) and
# which it may not (where the lesson asks for the count or the formula itself). A refused call fails the
# check with one sentence; course.grading.model_policy says how it is seen, and that the re-check reads the answer cell
# as handed in, so an answer cell that switches the notebook's watch off gains nothing.

@dataclass(frozen=True)
class ModelPolicy:
    refused: tuple[str, ...] = ()
    """Course functions (dotted names) that compute what the exercise asks: its answer may not call them."""
    why: str = ""
    """Why not, completing the sentence "your answer may not use f: ..."."""
    allowed: tuple[str, ...] = ()
    """Course functions the lesson hands the learner for this exercise."""

    def sentence(self, exercise: str, name: str) -> str:
        return f"{exercise}: your answer may not use {name}: {self.why}."


# -- what the grader runs for a lesson beyond its checks ---------------------------------------------

ProbeSource = Callable[[], Mapping[str, Callable]]
"""A lesson module's function ``probes``: it imports the lesson's probes and returns them by name (:attr:`Exercise.probe`).
The answer process calls every one before the setup and any answer cell run (course.grading.answer_process)."""

CellBuilder = Callable[[str, str, str, dict, dict], dict]
"""How the re-check builds an answer cell of a kind a lesson adds (a lesson module's ``CELL_BUILDERS``, by kind; lesson
09's TT-Lang cells are ``"tt"``): ``(source, where, exercise, setup, earlier) -> {name: value}``, what the cell defines,
from its text as handed in, the setup's names and what earlier cells of its kind defined (course.grading.recheck)."""


STOP_AT_FIRST_PASS = False
"""Set by the grader's re-check (course.grading.recheck) while it runs: once a track of a step passes
(course.track_choice), the practice tracks cost time and change nothing."""
