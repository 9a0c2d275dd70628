"""What belongs to one lesson: ``lessonNN`` holds lesson NN's graded exercises (a tuple ``EXERCISES``), their checks,
and their hint ladders (a tuple ``LADDERS``), and, where it has them, the arguments its hidden tests draw (``DRAWS``),
which course functions its numeric answers may call (``MODEL_POLICY``) and what the grader runs for it beyond its
checks (a function ``probes``, a dict ``CELL_BUILDERS``; course.grading.exercise says what each is).

:func:`lesson_modules` finds them and :func:`load` reads their declarations into one :class:`Lessons`, so a new
lesson is one new module. Nothing is put anywhere by importing a lesson: ``course.exercises`` and
``course.hint_ladder`` assemble the learner's API from what they read here, and the grader's processes, whose code
sits below the lessons (course.grading.recheck, course.grading.answer_process), are handed what they need by their
entry points (``python -m course recheck`` / ``answer-process``, course.__main__), which call :func:`load`.

Beside them, lesson 08's fp8 half (``lesson08_fp8``, declared by ``lesson08``), and what a lesson's checks run on: the
capstone's probes (lesson 08, ``capstone``), and lesson 09's dataflow
machine (``dataflow``: the TT-Lang simulator and how the course runs on it; ``dst``: the DST register census;
``tt_answer``: reading a learner's TT-Lang answer).
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import Any, Callable, Mapping

from course.errors import CourseError
from course.grading.exercise import CellBuilder, Draw, Exercise, Ladder, ModelPolicy, ProbeSource

__all__ = ["Lessons", "load", "assemble", "lesson_modules", "gathered"]

_LESSON = re.compile(r"lesson\d\d")


def lesson_modules() -> list[ModuleType]:
    """Every ``course.lessons.lessonNN`` module, imported, in lesson order."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if _LESSON.fullmatch(m.name))
    return [importlib.import_module(f"{__name__}.{name}") for name in names]


def gathered(name: str, modules: list[ModuleType] | None = None) -> dict[str, Any]:
    """The dicts every lesson module (or each of ``modules``) declares as ``name``, merged in lesson order (a module
    without one adds nothing); CourseError when two lessons declare the same key."""
    merged: dict[str, Any] = {}
    for module in lesson_modules() if modules is None else modules:
        declared = getattr(module, name, {})
        twice = sorted(declared.keys() & merged.keys())
        if twice:
            raise CourseError(f"{module.__name__}.{name} declares {twice[0]!r}, which an earlier lesson module declares too")
        merged.update(declared)
    return merged


@dataclass(frozen=True)
class Lessons:
    """What every lesson module declares, read once (:func:`load`). The mappings are read-only: whoever needs a table
    of its own (the checker's, which a test may change) copies it."""

    exercises: Mapping[str, Exercise]
    """Exercise id → its :class:`Exercise`, lesson by lesson (each lesson's own order within it)."""
    ladders: Mapping[str, Ladder]
    """Exercise id → its hint ladder (each lesson module's tuple ``LADDERS``)."""
    draws: Mapping[str, Draw]
    """Numeric exercise id → one argument set its hidden tests draw (each lesson module's ``DRAWS``)."""
    model_policy: Mapping[str, ModelPolicy]
    """Numeric exercise id → which of the course's model functions its answer may call (``MODEL_POLICY``)."""
    probe_sources: tuple[ProbeSource, ...]
    """Each lesson module's function ``probes``, in lesson order; :meth:`probes` calls them."""
    cell_builders: Mapping[str, CellBuilder]
    """Answer-cell kind a lesson adds → the function that builds such a cell (each lesson module's ``CELL_BUILDERS``)."""

    def probes(self) -> dict[str, Callable]:
        """Every probe of the course by name (:attr:`Exercise.probe`), imported now."""
        return {name: probe for source in self.probe_sources for name, probe in source().items()}


def _by_key(modules: list[ModuleType], name: str, key: Callable[[Any], str], what: str) -> dict[str, Any]:
    """The entries of the tuple each module declares as ``name``, by ``key``, in lesson order; CourseError when a key
    comes twice."""
    found: dict[str, Any] = {}
    for module in modules:
        for entry in getattr(module, name, ()):
            if key(entry) in found:
                raise CourseError(f"{module.__name__}.{name} holds {what}{key(entry)!r} twice, or an earlier lesson "
                                  f"module holds {'one' if what else 'it'} too")
            found[key(entry)] = entry
    return found


def assemble(modules: list[ModuleType]) -> Lessons:
    """The declarations of ``modules`` (lesson modules, in lesson order) as one :class:`Lessons`; CourseError when two
    of them declare the same exercise, draw, policy or kind of cell."""
    exercises = _by_key(modules, "EXERCISES", lambda exercise: exercise.id, "")
    ladders = _by_key(modules, "LADDERS", lambda rungs: rungs.exercise, "a ladder for ")
    return Lessons(exercises=MappingProxyType(exercises), ladders=MappingProxyType(ladders),
                   draws=MappingProxyType(gathered("DRAWS", modules)),
                   model_policy=MappingProxyType(gathered("MODEL_POLICY", modules)),
                   probe_sources=tuple(module.probes for module in modules if hasattr(module, "probes")),
                   cell_builders=MappingProxyType(gathered("CELL_BUILDERS", modules)))


@functools.cache
def load() -> Lessons:
    """Every lesson module's declarations (:func:`assemble` of :func:`lesson_modules`), read on the first call and
    kept: the checker, the re-check and the answer process all ask for them, and a process reads them once."""
    return assemble(lesson_modules())
