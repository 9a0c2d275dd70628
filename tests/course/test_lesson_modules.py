"""A lesson is its module: what course.exercises reads for a lesson (its draws, its model-function policy, what the
grader runs for it) is declared in ``course/lessons/lessonNN.py`` and found there, never listed centrally."""
from __future__ import annotations

import types

import pytest

from course import exercises
from course.errors import CheckFailed, CourseError
from course.grading import exercise as declared
from course.lessons import capstone, gathered, lesson_modules, lesson09


@pytest.mark.parametrize("name", ["DRAWS", "ENUMERATED", "MODEL_POLICY"])
def test_each_lesson_declares_only_its_own_exercises(name):
    assembled = getattr(exercises, name)
    seen = {}
    for module in lesson_modules():
        own = {e.id for e in module.EXERCISES}
        for exercise in getattr(module, name, {}):
            assert exercise in own, f"{module.__name__}.{name} declares {exercise}, an exercise of another lesson"
            seen[exercise] = module
    assert set(assembled) == set(seen), set(assembled) ^ set(seen)
    assert all(assembled[e] is getattr(m, name)[e] for e, m in seen.items())


def test_a_key_two_lessons_declare_is_refused():
    first = types.ModuleType("course.lessons.lesson98")
    second = types.ModuleType("course.lessons.lesson99")
    first.DRAWS = {"98.same": 1}
    second.DRAWS = {"98.same": 2}
    assert gathered("DRAWS", [first]) == {"98.same": 1}
    assert gathered("DRAWS", [first, types.ModuleType("course.lessons.lesson97")]) == {"98.same": 1}
    with pytest.raises(CourseError, match=r"lesson99\.DRAWS declares '98\.same', which an earlier lesson module"):
        gathered("DRAWS", [first, second])


def test_what_the_grader_runs_for_a_lesson_is_the_lessons_own():
    """The answer process and the re-check sit below the lessons: they find lesson 08's probes and lesson 09's
    TT-Lang cells where course.exercises put them, and every probe an exercise names is there."""
    assert declared.probes() == capstone.PROBES
    named = {e.probe for e in exercises.EXERCISES.values() if e.probe is not None}
    assert named and named <= set(declared.probes())
    assert declared.CELL_BUILDERS == lesson09.CELL_BUILDERS
    # The builder is the lesson's gate and build: a cell outside TT-Lang is refused, one inside it is built.
    built = declared.CELL_BUILDERS["tt"]("def f(x):\n    return math.sqrt(x)\n", "your cell", "09.x", {}, {})
    assert built["f"](4.0) == 2.0
    with pytest.raises(CheckFailed, match=r"09\.x: your cell, line 1: `import os` imports os"):
        declared.CELL_BUILDERS["tt"]("import os\nos.getcwd()\n", "your cell", "09.x", {}, {})
