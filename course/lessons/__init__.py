"""What belongs to one lesson: ``lessonNN`` holds lesson NN's graded exercises (a tuple ``EXERCISES``), their checks,
and their hint ladders (a tuple ``LADDERS``), and, where it has them, the arguments its hidden tests draw (``DRAWS``,
``ENUMERATED``), which course functions its numeric answers may call (``MODEL_POLICY``) and what the grader runs for
it beyond its checks (``probes``, ``CELL_BUILDERS``; course.grading.exercise says what each is);
:func:`lesson_modules` finds them, and ``course.exercises`` and ``course.hint_ladder`` assemble the course from them
(:func:`gathered`), so a new lesson is one new module. Beside them, what a lesson's checks run on: the capstone's
probes (lesson 08, ``capstone``), and lesson 09's dataflow machine (``dataflow``: the TT-Lang simulator and how the
course runs on it; ``dst``: the DST register census; ``tt_answer``: reading a learner's TT-Lang answer).
"""
from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType
from typing import Any

from course.errors import CourseError

__all__ = ["lesson_modules", "gathered"]

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
