"""What belongs to one lesson: ``lessonNN`` holds lesson NN's graded exercises (a tuple ``EXERCISES``), their checks,
and their hint ladders (a tuple ``LADDERS``); :func:`lesson_modules` finds them, and ``course.exercises`` and
``course.hint_ladder`` assemble the course from them. Beside them, what a lesson's checks run on: the capstone's
probes (lesson 08, ``capstone``), and lesson 09's dataflow machine (``dataflow``: the TT-Lang simulator and how the
course runs on it; ``dst``: the DST register census; ``tt_answer``: reading a learner's TT-Lang answer).
"""
from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType

__all__ = ["lesson_modules"]

_LESSON = re.compile(r"lesson\d\d")


def lesson_modules() -> list[ModuleType]:
    """Every ``course.lessons.lessonNN`` module, imported, in lesson order."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if _LESSON.fullmatch(m.name))
    return [importlib.import_module(f"{__name__}.{name}") for name in names]
